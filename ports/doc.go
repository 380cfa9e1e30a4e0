// Package ports declares what Ferry's use cases need from the outside world,
// as small interfaces owned by their consumer:
//
//   - storage: SnapshotStore (the node's ZFS datasets, snapshots and
//     streams), WriteLock, Mounter and MountTable (bind mounts into pods);
//   - shared state: ClusterState (the replica list, changed only by
//     compare-and-swap), StateWatcher, StateFeed, SpecRecorder;
//   - peers and the node's own processes: Transport (snapshot streams),
//     PromiseAsker, ReplicaControl (the node plugin to its volume
//     managers);
//   - node loss: NodeLease, NodeLeases, Fencer, HolderStopper, NodeFencer,
//     FailoverEffects, PermitPublisher, PermitReader, FenceRecords;
//   - Kubernetes' view: NodePlacement, ReplicaWorkload, Claims;
//   - peer identities: CertificateEnrollment, PeerIdentityFiles, PeerRoots
//     (a node's own certificate), SigningRequests, PeerCA (the signer);
//   - EventRecorder.
//
// Each interface documents its contract: the errors it returns (the Err*
// sentinels, matched with errors.Is) and who closes what. SnapshotStore,
// ClusterState and StateWatcher have contract suites every implementation
// passes (tests/contract); the others are tested with their adapters
// (ARCHITECTURE.md, section 3).
//
//go:generate go tool mockgen -destination=mocks/mocks.go -package=mocks github.com/ferry-csi/ferry/ports SnapshotStore,MountTable,Mounter,ClusterState,Transport,EventRecorder,NodePlacement,ReplicaWorkload,ReplicaRollout,ReplicaControl,Fencer,NodeLease,NodeLeases,FailoverEffects,PermitPublisher,PermitReader,FenceRecords,WriteLock,HolderStopper
package ports
