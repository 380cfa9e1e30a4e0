package orchestration

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/ports"
)

// Placement is a node daemon's placement loop: every Period the Adopter
// (a volume manager for each listed local copy, a surplus copy leaving)
// and then the Labeler (the node's placement labels); between periods the
// labels again at once when a change of a volume's state may move where
// the volume is usable (Labeler.ChangedBy): a release, a promotion, a copy
// turning ready places the node without waiting, so a pod moving here
// waits for the label no longer than that.
//
// The Feed (nil: the period alone) also keeps the node's other views of
// the states current: each change is handed to every Listener first, in
// the order it came, and nothing there waits for the labels' work, which
// runs in Run's own loop, woken by a coalesced kick.
type Placement struct {
	Labeler *Labeler
	// Rediscoverer (nil: none) rebuilds lost states from the local
	// copies and answers rebuilt states' surveys, every Period, before
	// the Adopter (which then runs the copies listed).
	Rediscoverer *Rediscoverer
	// Retirer (nil: none) takes the entries of copies gone for good out
	// of the states (a deleted node's, this node's when its pool holds no
	// copy), every Period, before the Adopter.
	Retirer   *Retirer
	Adopter   *Adopter // nil: no volume managers started here
	Feed      ports.StateFeed
	Listeners []func(ports.StateChange)
	Period    time.Duration
	Log       *zap.Logger
}

// Run loops until ctx ends.
func (p *Placement) Run(ctx context.Context) {
	kick := make(chan struct{}, 1)
	if p.Feed != nil {
		if feed, err := p.Feed.Feed(ctx); err != nil {
			p.Log.Warn("placement labels follow the volumes' states only every placement period", zap.Error(err))
		} else {
			go func() {
				for c := range feed {
					for _, l := range p.Listeners {
						l(c)
					}
					if p.Labeler.ChangedBy(c) {
						select {
						case kick <- struct{}{}:
						default:
						}
					}
				}
			}()
		}
	}
	t := time.NewTicker(p.Period)
	defer t.Stop()
	full := true
	for {
		if p.Rediscoverer != nil && full {
			if err := p.Rediscoverer.Sync(ctx); err != nil && ctx.Err() == nil {
				p.Log.Warn("lost states not all rebuilt or answered", zap.Error(err))
			}
		}
		if p.Retirer != nil && full {
			if err := p.Retirer.Sync(ctx); err != nil && ctx.Err() == nil {
				p.Log.Warn("departed copies not all retired", zap.Error(err))
			}
		}
		if p.Adopter != nil && full {
			if _, err := p.Adopter.Sync(ctx); err != nil && ctx.Err() == nil {
				p.Log.Warn("local copies not all running", zap.Error(err))
			}
		}
		if usable, err := p.Labeler.Sync(ctx); err != nil && ctx.Err() == nil {
			p.Log.Warn("placement labels not updated", zap.Error(err))
		} else if err == nil {
			p.Log.Debug("placement labels checked", zap.Int("usable", len(usable)))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			full = true
		case <-kick:
			full = false
		}
	}
}
