package orchestration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/ports"
)

// Binder gives each pending Immediate claim a node: every daemon runs
// one, and all choose the same node (placement.SelectNode), so the first
// write wins and the others find it done; no leader, no election, and a
// node that dies takes no binding duty with it.
type Binder struct {
	claims ports.Claims
	log    *zap.Logger
}

// NewBinder returns a binder over claims.
func NewBinder(claims ports.Claims, log *zap.Logger) *Binder {
	return &Binder{claims: claims, log: log}
}

// Sync selects a node for every pending claim once; it returns how many
// this call selected. A claim another daemon selected first is not an
// error.
func (b *Binder) Sync(ctx context.Context) (int, error) {
	pending, err := b.claims.Pending(ctx)
	if err != nil || len(pending) == 0 {
		return 0, err
	}
	nodes, err := b.claims.Candidates(ctx)
	if err != nil {
		return 0, err
	}
	selected := 0
	var errs []error
	for _, c := range pending {
		node, ok := placement.SelectNode(c.UID, nodes)
		if !ok {
			errs = append(errs, fmt.Errorf("claim %s/%s: no node runs Ferry, schedulable and ready", c.Namespace, c.Name))
			continue
		}
		switch err := b.claims.Select(ctx, c, node); {
		case errors.Is(err, ports.ErrConflict):
			continue // another daemon was first
		case err != nil:
			errs = append(errs, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err))
			continue
		}
		selected++
		b.log.Info("selected the node of an Immediate claim", zap.String("claim", c.Namespace+"/"+c.Name), zap.String("node", string(node)))
	}
	return selected, errors.Join(errs...)
}

// Run syncs on every change, and every period (a retry after errors).
func (b *Binder) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if _, err := b.Sync(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn("Immediate claims not all placed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-b.claims.Changes():
		case <-t.C:
		}
	}
}
