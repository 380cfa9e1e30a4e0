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
}

// LeaveFunc runs the safe-deletion protocol for this node's copy of a
// volume, here, as a terminating volume manager would
// (replication.Replicator's Terminate): nil once the copy is destroyed and
// its entry gone, replica.ErrUnsafe (wrapped) when the rule keeps the copy.
type LeaveFunc func(ctx context.Context, id volume.ID) error

// NewAdopter returns the adopter of node.
func NewAdopter(node replica.Node, store Store, cluster ports.ClusterState, w ports.ReplicaWorkload, leave LeaveFunc, log *zap.Logger) *Adopter {
	return &Adopter{node: node, store: store, cluster: cluster, workload: w, leave: leave, log: log}
}

// Sync looks at every local copy once; it returns the volumes whose pod
// it started. Errors of one volume do not stop the others.
func (a *Adopter) Sync(ctx context.Context) ([]volume.ID, error) {
	vols, err := a.store.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("adopt copies on %s: list local volumes: %w", a.node, err)
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
