// Package ports declares what Ferry's use cases need from the outside world,
// as small interfaces owned by their consumer: SnapshotStore (the node's ZFS
// datasets, snapshots and streams), Mounter (bind mounts into pods),
// ClusterState (the shared replica list, changed only by compare-and-swap)
// and Transport (snapshot streams from peers).
//
// Each interface documents its contract: the errors it returns (the Err*
// sentinels below, matched with errors.Is) and who closes what. Every
// implementation passes the same contract suite (tests/contract).
//
//go:generate go tool mockgen -destination=mocks/mocks.go -package=mocks github.com/ferry-csi/ferry/ports SnapshotStore,MountTable,Mounter,ClusterState,Transport,EventRecorder,NodePlacement,ReplicaWorkload,ReplicaControl,Fencer,NodeLease,NodeLeases,FailoverEffects,PermitPublisher,PermitReader,FenceRecords,WriteLock,HolderStopper
package ports
