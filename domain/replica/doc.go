// Package replica holds the shared state of a replicated volume (its replica
// list, epoch and primary) and the pure rules that read and change it:
// snapshot numbering, the choice of a source and the plan of a transfer,
// readiness, retention, the safe-deletion rule of seed 000, promotion,
// demotion, takeover, and the copy of a fenced term's writes kept aside.
//
// The state is what ClusterState stores; every change to it is a
// compare-and-swap on State.Version made by an adapter, so two replicas that
// decide at once cannot both act on the same version. Machine is one
// replica's decisions (events in, one action out at a time, in the style of
// etcd's raft), which a volume manager (app/replication) carries out.
package replica
