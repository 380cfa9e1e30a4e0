package ports

import (
	"context"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// NodeLease is this node's own liveness lease (Kubernetes: a
// coordination.k8s.io Lease per node in Ferry's namespace, which also
// publishes the node's peer address). Liveness is per node, not per
// volume: renewals grow with nodes.
type NodeLease interface {
	// Renew renews the lease once. nil only when the server accepted the
	// renewal; an observer then sees a new value (LeaseRecord.Value).
	Renew(ctx context.Context) error
}

// NodeLeases reads every node's lease.
type NodeLeases interface {
	// Leases maps each node that has a lease to what it holds now.
	Leases(ctx context.Context) (map[replica.Node]LeaseRecord, error)
}

// LeaseRecord is one node's lease as read: Value changes with every
// renewal (and only then); PeerAddress is where its peer service listens;
// Duration is how long the node says it holds its lease (0: not said).
type LeaseRecord struct {
	Value       string
	PeerAddress string
	Duration    time.Duration
}

// FailoverEffects carries out, in the cluster, what a takeover decided
// about the lost node (each call idempotent, safe to repeat after any
// error).
type FailoverEffects interface {
	// Unplace removes the placement of volume id from node (the scheduler
	// may no longer pick node for the volume's pods).
	Unplace(ctx context.Context, node replica.Node, id volume.ID) error
	// Taint marks node fenced (Kubernetes: the NoSchedule taint
	// ferry.zfs.csi.io/fenced), or no longer when on is false.
	Taint(ctx context.Context, node replica.Node, on bool) error
	// Tainted reports whether node is marked fenced.
	Tainted(ctx context.Context, node replica.Node) (bool, error)
	// EvictPods force-deletes (grace 0, with the pod's UID as a
	// precondition) the pods bound to node that use volume id and are
	// owned by a controller, which recreates them elsewhere; a pod nobody
	// owns is left alone. It returns the pods deleted, as namespace/name.
	EvictPods(ctx context.Context, node replica.Node, id volume.ID) ([]string, error)
	// RemoveReplicaPods force-deletes (grace 0, with the pod's UID as a
	// precondition) volume id's replica pods bound to node, in its
	// ReplicaSet or outside it (the primary's): the volume's workload then
	// counts them no more, and its ReplicaSet replaces its own. It returns
	// the pods deleted, as namespace/name.
	RemoveReplicaPods(ctx context.Context, node replica.Node, id volume.ID) ([]string, error)
	// OutOfService lists the nodes an administrator declared shut down
	// (Kubernetes: the node.kubernetes.io/out-of-service taint of
	// non-graceful node shutdown): they are taken for lost at once.
	OutOfService(ctx context.Context) ([]replica.Node, error)
}

// NodeFencer fences a lost node from outside before any of its volumes
// is taken over (a power switch, a remediation operator, a command an
// administrator configures). nil only once the node can no longer write:
// powered off, cut from its disks, or known to be down.
type NodeFencer interface {
	FenceNode(ctx context.Context, node replica.Node) error
}

// PromiseAsker asks another node, over the peer channel, not to take this
// node's volumes over for a while: what lets a primary write on through an
// API server outage (domain/liveness).
type PromiseAsker interface {
	// Promise answers whether node promised asker, and for how long from
	// when the request was sent. An error when node could not be asked.
	Promise(ctx context.Context, node, asker replica.Node) (bool, time.Duration, error)
}

// FencedTaint is the key of the taint (effect NoSchedule) on a node whose
// primaries were taken over while it was lost: set by the survivor
// (FailoverEffects), lifted when its copies are ready again, tolerated by
// the replica pods (they must run there to catch up). One source for the
// adapters that set and tolerate it and for the events that name it.
const FencedTaint = "ferry.zfs.csi.io/fenced"
