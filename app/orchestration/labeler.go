// Package orchestration holds the node daemon's use cases that keep
// Kubernetes' view of Ferry's volumes in line with their replica state:
// which nodes may run a volume's pods (Labeler: the node's placement
// labels), a volume manager for every copy in the node's pool and the
// size of the workloads of the volumes whose primary is here (Adopter),
// the daemon's loop over both, woken by the feed of every volume's state
// (Placement), and the node of each Immediate claim (Binder). What to
// place, scale, start or select is decided in domain/placement; these use
// cases read, ask the domain and hand the answer to a port.
package orchestration

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Labeler keeps this node's placement in line with its copies: a volume
// with a copy here may be used here while that copy is ready (or the
// active primary), per placement.Usable.
type Labeler struct {
	node    replica.Node
	store   Store
	cluster ports.ClusterState
	placer  ports.NodePlacement
	log     *zap.Logger

	mu sync.Mutex
	// placed is the last placement written: the volumes usable here.
	placed map[volume.ID]bool
}

// NewLabeler returns the labeler of node.
func NewLabeler(node replica.Node, store Store, cluster ports.ClusterState, placer ports.NodePlacement, log *zap.Logger) *Labeler {
	return &Labeler{node: node, store: store, cluster: cluster, placer: placer, log: log}
}

// Sync reads every local copy's state and places the node accordingly. A
// volume whose state cannot be read keeps its placement (unknown); one
// with no state (deleted, or not yet created) or no entry for this node is
// not usable here. It returns the volumes placed usable.
func (l *Labeler) Sync(ctx context.Context) ([]volume.ID, error) {
	vols, err := l.store.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("place node %s: list local volumes: %w", l.node, err)
	}
	var usable, unknown []volume.ID
	var readErrs []error
	for _, v := range vols {
		st, err := l.cluster.Get(ctx, v.ID)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			continue
		case err != nil:
			unknown = append(unknown, v.ID)
			readErrs = append(readErrs, err)
			continue
		}
		if placement.Usable(st, l.node) {
			usable = append(usable, v.ID)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := l.placer.Place(ctx, l.node, usable, unknown); err != nil {
		return nil, fmt.Errorf("place node %s: %w", l.node, err)
	}
	placed := make(map[volume.ID]bool, len(usable))
	for _, id := range usable {
		placed[id] = true
	}
	l.mu.Lock()
	l.placed = placed
	l.mu.Unlock()
	if len(readErrs) > 0 {
		l.log.Warn("placement left unchanged for volumes whose state could not be read",
			zap.Int("volumes", len(unknown)), zap.Error(errors.Join(readErrs...)))
	}
	return usable, nil
}

// Changed reports whether st, a volume's state just seen changing, makes
// the volume usable here or not where the last placement said otherwise:
// then the node is placed again at once (a pod moving to this node waits
// for it), rather than at the next periodic Sync. Safe from any goroutine.
func (l *Labeler) Changed(st replica.State) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return placement.Usable(st, l.node) != l.placed[st.Volume]
}

// ChangedBy is Changed for a change sent by the feed: a volume gone is
// usable nowhere.
func (l *Labeler) ChangedBy(c ports.StateChange) bool {
	if c.Gone {
		return l.Changed(replica.State{Volume: c.Volume})
	}
	return l.Changed(c.State)
}
