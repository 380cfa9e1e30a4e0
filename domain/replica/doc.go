// Package replica holds the shared state of a replicated volume (its replica
// list, epoch and primary) and the pure rules that read it: snapshot
// numbering and the safe-deletion rule of seed 000.
//
// The state is what ClusterState stores; every change to it is a
// compare-and-swap on State.Version made by an adapter, so two replicas that
// decide at once cannot both act on the same version. The replication state
// machine (events in, actions out, in the style of etcd's raft) grows here.
package replica
