package ports

import (
	"context"
	"time"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// ReplicaWorkload runs a replicated volume's volume managers (Kubernetes:
// a ReplicaSet of replica pods and its PodDisruptionBudget, owned by the
// volume's ReplicatedVolume, whose state must exist first).
type ReplicaWorkload interface {
	// Apply makes the volume's workload say o: how many secondaries run,
	// how many a drain must leave. Idempotent; writes only what differs.
	Apply(ctx context.Context, id volume.ID, o placement.Objects, snapshotInterval time.Duration) error
	// StartReplica starts node's volume manager of volume id, pinned to
	// node, unless one runs. A secondary's is counted by the workload
	// (which adopts it); the active primary's is not (it leaves the
	// ReplicaSet while active, seed 000).
	StartReplica(ctx context.Context, id volume.ID, node replica.Node, snapshotInterval time.Duration, primary bool) error
	// Status reports the volume's workload as it is; ErrNotFound when the
	// volume has none.
	Status(ctx context.Context, id volume.ID, node replica.Node) (WorkloadStatus, error)
	// Scale sets how many secondaries run (before an adoption: a workload
	// deletes a surplus pod at once).
	Scale(ctx context.Context, id volume.ID, secondaries int) error
	// Segment is the topology segment (key, value) of the nodes where the
	// volume may be used (placement labels, kept by each node's daemon).
	Segment(id volume.ID) (key, value string)
	// SetOutside moves node's replica pod of id out of the workload (a
	// publish: the ReplicaSet stops counting it and can no longer delete
	// it) or back in (unpublish), the pod running on either way.
	// ErrNotFound when node has no live pod of the volume.
	SetOutside(ctx context.Context, id volume.ID, node replica.Node, outside bool) error
}

// WorkloadStatus is a volume's workload as the cluster shows it.
type WorkloadStatus struct {
	// Secondaries is the wanted number of secondaries (ReplicaSet
	// replicas); Running how many of its pods exist and are not being
	// deleted.
	Secondaries, Running int
	// Outside is how many live pods of the volume run outside the
	// workload (the active primary's, a publishing replica's);
	// OutsideOnNode says whether the asked node's is one of them.
	Outside       int
	OutsideOnNode bool
	// OnNode says whether the node asked about has a pod of the volume
	// (secondary or primary), even one being deleted: its volume manager
	// may be leaving the volume, and a new one must not undo that.
	OnNode bool
}

// ReplicaRollout rolls the volumes' replica pods to the version of the
// daemon that runs it (placement.NextRoll decides which pod, and when).
type ReplicaRollout interface {
	// Current reports whether this daemon runs the deployment's current
	// version (Kubernetes: the node DaemonSet's image): only such a daemon
	// rolls pods to its own version, so that a daemon not yet updated in
	// a roll never takes pods back.
	Current(ctx context.Context) (bool, error)
	// RolloutPods lists the volume's replica pods, each with whether it
	// runs this daemon's version, after the volume's template (the pods
	// its workload makes from now on) is set to that version.
	RolloutPods(ctx context.Context, id volume.ID) ([]placement.RollPod, error)
	// Renew restarts a replica pod's volume manager on this daemon's
	// version in place: the pod, its node and its copy stay.
	Renew(ctx context.Context, id volume.ID, pod string) error
}

// NextDaemons tells a stopping daemon about the pod that replaces its own
// on its node (liveness.Handover decides whether it keeps the node
// meanwhile).
type NextDaemons interface {
	// NextDaemon reads the other pod of this daemon's DaemonSet on its
	// node, if any, and when this daemon's own pod is killed.
	NextDaemon(ctx context.Context) (liveness.NextDaemon, error)
}
