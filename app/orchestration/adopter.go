package orchestration

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Adopter keeps a volume manager running for every copy in this node's
// pool that its volume's state lists (after a daemon or node restart, a
// drain, a deleted pod), and keeps the workload of the volumes whose
// primary is this node sized as placement.Desired says. Each volume's
// workload has one sizer, its primary's daemon, so no leader is needed.
type Adopter struct {
	node     replica.Node
	store    Store
	cluster  ports.ClusterState
	workload ports.ReplicaWorkload
	leave    LeaveFunc
	log      *zap.Logger
	// rollout (nil: none) rolls the replica pods of the volumes this
	// node rolls (placement.Roller) to this daemon's version; rolling is
	// set for one Sync when this daemon is the deployment's current one.
	rollout ports.ReplicaRollout
	rolling bool
	said    *bool // the last currency logged
}

// AdopterOption adds an optional duty to an adopter.
type AdopterOption func(*Adopter)

// WithRollout makes the adopter roll the replica pods of the volumes this
// node rolls to this daemon's version, one pod at a time
// (placement.NextRoll), while it is the deployment's current version.
func WithRollout(r ports.ReplicaRollout) AdopterOption {
	return func(a *Adopter) { a.rollout = r }
}

// LeaveFunc runs the safe-deletion protocol for this node's copy of a
// volume, here, as a terminating volume manager would
// (replication.Replicator's Terminate): nil once the copy is destroyed and
// its entry gone, replica.ErrUnsafe (wrapped) when the rule keeps the copy.
type LeaveFunc func(ctx context.Context, id volume.ID) error

// NewAdopter returns the adopter of node.
func NewAdopter(node replica.Node, store Store, cluster ports.ClusterState, w ports.ReplicaWorkload, leave LeaveFunc, log *zap.Logger, opts ...AdopterOption) *Adopter {
	a := &Adopter{node: node, store: store, cluster: cluster, workload: w, leave: leave, log: log}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Sync looks at every local copy once; it returns the volumes whose pod
// it started. Errors of one volume do not stop the others.
func (a *Adopter) Sync(ctx context.Context) ([]volume.ID, error) {
	vols, err := a.store.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("adopt copies on %s: list local volumes: %w", a.node, err)
	}
	a.rolling = false
	if a.rollout != nil {
		current, err := a.rollout.Current(ctx)
		if err != nil {
			a.log.Warn("cannot tell whether this daemon is the deployment's current version: no replica pod is rolled", zap.Error(err))
		}
		if err == nil && (a.said == nil || *a.said != current) {
			a.said = &current
			if current {
				a.log.Info("this daemon runs the deployment's current version: it rolls the replica pods of the volumes it rolls to it")
			} else {
				a.log.Info("this daemon does not run the deployment's current version (its DaemonSet names another image): it rolls no replica pod")
			}
		}
		a.rolling = current
	}
	var started []volume.ID
	var errs []error
	for _, v := range vols {
		ok, err := a.one(ctx, v.ID)
		if err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", v.ID, err))
		}
		if ok {
			started = append(started, v.ID)
		}
	}
	return started, errors.Join(errs...)
}

func (a *Adopter) one(ctx context.Context, id volume.ID) (bool, error) {
	st, err := a.cluster.Get(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		return false, nil // not replicated, or deleted: nothing to run
	}
	if err != nil {
		return false, err
	}
	self, listed := st.Replica(a.node)
	if !listed {
		return false, nil
	}
	ws, err := a.workload.Status(ctx, id, a.node)
	if errors.Is(err, ports.ErrNotFound) {
		// Not made yet (CreateVolume in progress), or gone: deleted by
		// hand, or with a state that was lost and rebuilt. Its sizer (the
		// primary's daemon; with no primary, any listed copy's) makes
		// it, as CreateVolume would; the copies' pods follow.
		if st.Deleting || (st.Primary != a.node && st.Primary != "") {
			return false, nil
		}
		if err := a.workload.Apply(ctx, id, placement.Remade(st), st.SnapshotInterval); err != nil {
			return false, fmt.Errorf("making its missing workload: %w", err)
		}
		a.log.Warn("made the missing workload of a volume", zap.String("volume", string(id)))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Primary == a.node {
		// The sizer of this volume's workload: the pods outside it (the
		// active primary's, a publishing replica's) are not its to run.
		if err := a.workload.Apply(ctx, id, placement.DesiredAround(st, ws.Outside), 0); err != nil {
			return false, err
		}
	}
	if a.rolling && !st.Deleting && placement.Roller(st) == a.node {
		if err := a.roll(ctx, id); err != nil {
			a.log.Warn("the volume's replica pods were not rolled to this version", zap.String("volume", string(id)), zap.Error(err))
		}
	}
	if ws.OnNode {
		return false, nil
	}
	d := placement.Adopt(st, a.node, ws.Secondaries, ws.Running)
	if d.Leave {
		err := a.leave(ctx, id)
		if err == nil {
			a.log.Info("destroyed a local copy without a pod", zap.String("volume", string(id)), zap.String("reason", d.Reason))
			return false, nil
		}
		if !d.Start {
			return false, fmt.Errorf("leaving: %w", err)
		}
		a.log.Info("a local copy without a pod is kept", zap.String("volume", string(id)), zap.Error(err))
	}
	if !d.Start {
		return false, nil
	}
	if !self.Active && d.RaiseTo > ws.Secondaries {
		if err := a.workload.Scale(ctx, id, d.RaiseTo); err != nil {
			return false, err
		}
	}
	if err := a.workload.StartReplica(ctx, id, a.node, 0, self.Active); err != nil {
		return false, err
	}
	a.log.Info("started the volume manager of a local copy", zap.String("volume", string(id)), zap.String("reason", d.Reason))
	return true, nil
}

// roll renews the next pod of volume id on this daemon's version, if one
// may be renewed now.
func (a *Adopter) roll(ctx context.Context, id volume.ID) error {
	pods, err := a.rollout.RolloutPods(ctx, id)
	if err != nil {
		return err
	}
	r := placement.NextRoll(pods)
	if r.Pod == "" {
		return nil
	}
	if err := a.rollout.Renew(ctx, id, r.Pod); err != nil {
		return err
	}
	a.log.Info("renewed a replica pod on this version", zap.String("volume", string(id)), zap.String("pod", r.Pod), zap.String("reason", r.Reason))
	return nil
}
