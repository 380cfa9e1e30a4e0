// Package provision carries out the CSI controller's use cases (Service)
// on the local store: it creates volumes (empty, or copies of a snapshot
// or of another volume), deletes, expands and lists them, takes, deletes
// and lists their CSI snapshots, and reports capacity, each call validated
// with the domain's rules (domain/volume), serialised per volume and
// idempotent. For a volume of replication factor 2 or more it also sets up
// replication: the volume's shared state with this node as its first
// primary, this node's volume manager, and the ReplicaSet and budget
// domain/placement sizes; deleting such a volume marks its state for its
// replicas to leave.
package provision
