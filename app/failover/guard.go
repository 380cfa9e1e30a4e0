package failover

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Guard keeps this node's lease and fences the primaries here once the
// node may no longer write (liveness.Decide): neither its lease (held
// Duration - Margin after sending the last renewal the server accepted)
// nor a running promise of every node that could take the volume over.
// Fencing lives in the daemon, not in the volume managers: a crashed
// volume manager does not disable it.
type Guard struct {
	cfg     Config
	clock   Clock
	lease   ports.NodeLease
	volumes *Volumes
	takers  *Takers
	store   ports.SnapshotStore
	mounts  ports.MountTable
	fencer  ports.Fencer
	effects ports.FailoverEffects
	events  ports.EventRecorder
	log     *zap.Logger
	asker   ports.PromiseAsker

	mu         sync.Mutex
	leaseUntil time.Duration
	tried      bool // a renewal was answered (or timed out) since start
	renewed    chan struct{}
	promises   []liveness.Promise
	fenced     map[volume.ID]liveness.Fence
	giveBack   map[volume.ID]liveness.Fence // fenced, may write again: its pods still to restart
	mine       map[volume.ID]bool           // active primary here at the last check
	looked     map[volume.ID]bool           // looked at by checkTakenOver since this process started
}

// NewGuard returns the guard of cfg.Node.
// Its fences cover the terms of takers (every volume whose primary here
// acknowledged a node that may take it over); volumes is its view of the
// shared state, which it folds into takers and reads to acknowledge the
// copies that report.
//
// A volume fenced here that may be written again without a takeover (the
// lease renewed in time, or a promise came) gets its pods back: they sit
// on the fence's empty read-only placeholder, so effects.EvictPods deletes
// the ones a controller owns on this node, which start again and are
// published anew.
func NewGuard(cfg Config, clock Clock, lease ports.NodeLease, volumes *Volumes, takers *Takers, store ports.SnapshotStore, mounts ports.MountTable, fencer ports.Fencer, effects ports.FailoverEffects, events ports.EventRecorder, log *zap.Logger) *Guard {
	return &Guard{cfg: cfg, clock: clock, lease: lease, volumes: volumes, takers: takers, store: store, mounts: mounts, fencer: fencer, effects: effects,
		events: events, log: log, renewed: make(chan struct{}, 1), fenced: map[volume.ID]liveness.Fence{}, giveBack: map[volume.ID]liveness.Fence{}, mine: map[volume.ID]bool{}, looked: map[volume.ID]bool{}}
}

// AskPromises lets the guard ask, when a renewal fails, every node that
// could take a volume here over for its promise not to (nil: never).
func (g *Guard) AskPromises(a ports.PromiseAsker) { g.asker = a }

// Run renews the lease every Renew and fences when the node may no longer
// write, until ctx ends. Renewals run apart from the checks, so a renewal
// hanging on a broken link never delays a fence.
func (g *Guard) Run(ctx context.Context) {
	go g.renewals(ctx)
	go g.acknowledgements(ctx)
	for {
		next := g.Check(ctx)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-g.renewed:
		case <-t.C:
		}
		t.Stop()
	}
}

func (g *Guard) renewals(ctx context.Context) {
	t := time.NewTicker(g.cfg.Lease.Renew)
	defer t.Stop()
	failing := false
	for {
		if err := g.RenewOnce(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			g.AskPromisesOnce(ctx)
			if !failing {
				g.log.Warn("node lease not renewed", zap.Error(err))
			}
			failing = true
		} else if failing {
			g.log.Info("node lease renewed again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// acknowledgements acknowledges, every Renew, the copies that reported a
// snapshot of a volume whose active primary is here as its takers (apart
// from the checks: a write hanging on a broken link never delays a
// fence). Until then such a copy may not take over: it waits.
func (g *Guard) acknowledgements(ctx context.Context) {
	t := time.NewTicker(g.cfg.Lease.Renew)
	defer t.Stop()
	for {
		g.AcknowledgeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// AcknowledgeOnce acknowledges the takers of every volume the view shows
// with its active primary here and a copy not yet acknowledged.
func (g *Guard) AcknowledgeOnce(ctx context.Context) {
	for _, st := range g.volumes.PrimaryOn(g.cfg.Node) {
		if len(replica.Candidates(st, g.cfg.Node)) == 0 {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, g.cfg.Lease.Renew)
		err := g.takers.Acknowledge(actx, st.Volume)
		cancel()
		if err != nil && ctx.Err() == nil {
			g.log.Warn("takers not acknowledged; a copy not acknowledged may not take over", zap.String("volume", string(st.Volume)), zap.Error(err))
		}
	}
}

// RenewOnce sends one renewal; accepted, the lease is held until
// Duration - Margin after it was sent.
func (g *Guard) RenewOnce(ctx context.Context) error {
	sent := g.clock()
	// A renewal that takes longer than the period counts as failed: the
	// promises are asked for while the lease still runs.
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Lease.Renew)
	defer cancel()
	err := g.lease.Renew(rctx)
	g.mu.Lock()
	g.tried = true
	g.mu.Unlock()
	if err != nil {
		return err
	}
	g.mu.Lock()
	if held := g.cfg.Lease.Held(sent); held > g.leaseUntil {
		g.leaseUntil = held
	}
	g.mu.Unlock()
	select {
	case g.renewed <- struct{}{}:
	default:
	}
	return nil
}

// AskPromisesOnce asks every node acknowledged as a taker of a volume
// whose primary is here (Takers) for its promise, all at once, each answer
// bounded by a renewal period; a promise granted runs from the request's
// send time on this node's clock.
func (g *Guard) AskPromisesOnce(ctx context.Context) {
	if g.asker == nil {
		return
	}
	g.takers.Learn(g.volumes.All()...)
	var wg sync.WaitGroup
	for _, t := range g.takers.All() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, g.cfg.Lease.Renew)
			defer cancel()
			sent := g.clock()
			ok, span, err := g.asker.Promise(actx, t, g.cfg.Node)
			if err != nil || !ok {
				g.log.Debug("no promise", zap.String("from", string(t)), zap.Error(err))
				return
			}
			g.Promised(liveness.Promise{From: t, Until: sent + span})
		}()
	}
	wg.Wait()
	select {
	case g.renewed <- struct{}{}:
	default:
	}
}

// Promised records promises received (from the peer channel): while every
// node that could take a volume over promised, its primary here writes on.
func (g *Guard) Promised(ps ...liveness.Promise) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	kept := g.promises[:0]
	for _, p := range g.promises {
		if p.Until > now {
			kept = append(kept, p)
		}
	}
	g.promises = append(kept, ps...)
}

// Writable says whether the primary of volume id here may write now (the
// node holds its lease, or every taker acknowledged promised), and why
// not.
func (g *Guard) Writable(id volume.ID) liveness.Verdict {
	g.takers.Learn(g.volumes.All()...)
	takers := g.takers.Of(id)
	g.mu.Lock()
	defer g.mu.Unlock()
	return liveness.Decide(g.standing(), takers)
}

// standing is the node's right to write now; g.mu held.
func (g *Guard) standing() liveness.Standing {
	return liveness.Standing{Now: g.clock(), LeaseUntil: g.leaseUntil, Promises: g.promises}
}

// Check fences every primary here that may no longer write and is not
// fenced yet, and returns when to check again at the latest. The
// primaries it judges are the terms of Takers (the view folded in first):
// a volume whose primary here acknowledged nobody cannot be taken over,
// so it writes on. Each fence, and each give-back, is a verdict of
// domain/liveness (fence.go); Check carries them out.
func (g *Guard) Check(ctx context.Context) time.Duration {
	next := g.cfg.Lease.Renew
	next = min(next, g.checkUnknown(ctx))
	next = min(next, g.checkTakenOver(ctx))
	g.takers.Learn(g.volumes.All()...)
	for _, term := range g.takers.Terms() {
		id := term.Volume
		g.mu.Lock()
		was, done := g.fenced[id]
		v := liveness.FenceOrGiveBack(g.standing(), term.Takers, done)
		if v.Act == liveness.GiveBack {
			delete(g.fenced, id)
			g.giveBack[id] = was
			g.log.Info("the node may write again", zap.String("volume", string(id)), zap.String("fenced because", was.Reason), zap.String("reason", v.Reason))
		}
		g.mu.Unlock()
		if v.Write.MayWrite {
			if left := v.Write.Until - g.clock(); left > 0 && left < next {
				next = left
			}
		}
		if v.Act != liveness.FenceIt {
			continue
		}
		if err := g.fence(ctx, id, v.Reason); errors.Is(err, ports.ErrNotFound) {
			g.volumes.Gone(id) // no copy here (any more): nothing writes it
			g.takers.Forget(id)
			continue
		} else if err != nil {
			g.log.Error("fence failed; trying again", zap.String("volume", string(id)), zap.Error(err))
			next = min(next, 100*time.Millisecond)
			continue
		}
		g.mu.Lock()
		g.fenced[id] = liveness.Fence{Reason: v.Reason}
		delete(g.giveBack, id)
		g.mu.Unlock()
	}
	next = min(next, g.giveBackPods(ctx))
	return max(next, time.Millisecond)
}

// giveBackPods restarts the pods of every volume fenced here that may be
// written again without having been taken over, as liveness.GiveBackPods
// says: the fence left them on an empty read-only placeholder, which only
// a new publish replaces. The resume is recorded first (Takers.Resume, by
// compare-and-swap: a takeover decided on the lease verdict this node
// outlived is then refused).
func (g *Guard) giveBackPods(ctx context.Context) time.Duration {
	g.mu.Lock()
	todo := make(map[volume.ID]liveness.Fence, len(g.giveBack))
	for id, f := range g.giveBack {
		todo[id] = f
	}
	g.mu.Unlock()
	next := g.cfg.Lease.Renew
	for id, f := range todo {
		resumed := liveness.ResumedNotPrimary
		mine, err := g.takers.Resume(ctx, id)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			resumed, err = liveness.ResumedGone, nil
		case err == nil && mine:
			resumed = liveness.ResumedPrimary
		}
		var v liveness.GiveBackVerdict
		if err == nil {
			v = liveness.GiveBackPods(f, resumed)
			if !v.Restart {
				g.mu.Lock()
				delete(g.giveBack, id)
				g.mu.Unlock()
				continue
			}
		}
		var pods []string
		if err == nil {
			pods, err = g.effects.EvictPods(ctx, g.cfg.Node, id)
		}
		if err != nil {
			g.log.Warn("the pods of a volume no longer fenced were not restarted; trying again", zap.String("volume", string(id)), zap.Error(err))
			next = min(next, 100*time.Millisecond)
			continue
		}
		g.mu.Lock()
		if g.giveBack[id] == f {
			delete(g.giveBack, id)
		}
		g.mu.Unlock()
		g.log.Info("pods of a volume no longer fenced restarted", zap.String("volume", string(id)), zap.Strings("pods", pods), zap.String("reason", v.Reason))
		g.events.Record(ctx, id, ports.Event{Type: ports.EventNormal, Reason: "Unfenced",
			Message: fmt.Sprintf("the primary on %s may write again without a takeover (it was fenced because %s); its pods here %v were deleted so that their controllers start them again on the volume (a pod no controller owns must be restarted by hand: it sees an empty read-only directory)", g.cfg.Node, f.Reason, pods)})
	}
	return next
}

// checkTakenOver fences a volume whose term here ended under a pod still
// writing it (liveness.FenceTakenOver: another node is the active primary
// and this one did not release it), reading the node's mounts, and the
// state afresh, only when the verdict asks.
func (g *Guard) checkTakenOver(ctx context.Context) time.Duration {
	next := g.cfg.Lease.Renew
	for _, st := range g.volumes.All() {
		g.mu.Lock()
		in := liveness.TakenOverView{Self: g.cfg.Node, State: st, SeenActive: g.mine[st.Volume], FirstLook: !g.looked[st.Volume]}
		if liveness.FenceTakenOver(in).Act == liveness.StillPrimary {
			g.mine[st.Volume] = true
			g.mu.Unlock()
			continue
		}
		g.looked[st.Volume] = true
		g.mu.Unlock()
		err := g.carryTakenOver(ctx, in)
		if err == nil {
			continue
		}
		next = min(next, 100*time.Millisecond)
		if in.SeenActive {
			// Remembered as active here: looked at again next time.
			g.log.Error("fence of a volume taken over failed; trying again", zap.String("volume", string(st.Volume)), zap.Error(err))
			continue
		}
		g.mu.Lock()
		delete(g.looked, st.Volume) // look again
		g.mu.Unlock()
	}
	return next
}

// carryTakenOver asks liveness.FenceTakenOver about one volume until it
// has all it needs, reads what it asks for, and carries the verdict out.
// A copy gone (no longer here) has no pod writing it.
func (g *Guard) carryTakenOver(ctx context.Context, in liveness.TakenOverView) error {
	id := in.State.Volume
	for {
		v := liveness.FenceTakenOver(in)
		switch v.Act {
		case liveness.ReadPodsWrite:
			rw, err := g.readWriteTargets(ctx, id)
			if err != nil && !errors.Is(err, ports.ErrNotFound) {
				return err
			}
			in.PodsWrite = liveness.ReadingOf(err == nil && rw)
			continue
		case liveness.ReadPrimaryNow:
			mine, err := g.takers.Primary(ctx, id)
			if err != nil {
				return err
			}
			in.PrimaryNow = liveness.ReadingOf(mine)
			continue
		case liveness.FenceTaken:
			if err := g.fence(ctx, id, v.Reason); err != nil && !errors.Is(err, ports.ErrNotFound) {
				return err
			}
		case liveness.NotTakenOver, liveness.StillPrimary:
			return nil
		}
		// PrimaryGone, or fenced: no longer remembered as active here.
		g.mu.Lock()
		delete(g.mine, id)
		g.mu.Unlock()
		return nil
	}
}

// readWriteTargets reports whether the volume's filesystem is mounted
// read/write anywhere on this node but at its own mountpoint.
func (g *Guard) readWriteTargets(ctx context.Context, id volume.ID) (bool, error) {
	info, err := g.store.GetVolume(ctx, id)
	if err != nil {
		return false, err
	}
	points, err := g.mounts.MountsOf(info.MountSource)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == info.MountPath {
			continue
		}
		if m, ok, err := g.mounts.MountAt(p); err == nil && ok && !m.ReadOnly {
			return true, nil
		}
	}
	return false, nil
}

// checkUnknown fences the local replicated copies the view knows nothing
// of once the node has tried to renew and does not hold its lease, and
// gives them back once it holds it again (liveness.FenceUnknown).
func (g *Guard) checkUnknown(ctx context.Context) time.Duration {
	next := g.cfg.Lease.Renew
	g.mu.Lock()
	lease := liveness.LeaseSeen{Held: g.clock() < g.leaseUntil, Tried: g.tried}
	for id, f := range g.fenced {
		if liveness.FenceUnknown(lease, liveness.UnknownCopy{Fence: f}).Act == liveness.GiveBack {
			delete(g.fenced, id)
			g.giveBack[id] = f
		}
	}
	g.mu.Unlock()
	if !lease.LooksForUnknown() {
		return next
	}
	vols, err := g.store.ListVolumes(ctx)
	if err != nil {
		g.log.Error("local volumes not listed; their fence waits", zap.Error(err))
		return 100 * time.Millisecond
	}
	for _, v := range vols {
		rf, rfErr := strconv.Atoi(v.Metadata[ports.MetaReplicationFactor])
		c := liveness.UnknownCopy{Known: g.volumes.Known(v.ID), SingleCopy: rfErr == nil && rf <= 1}
		g.mu.Lock()
		c.Fence = g.fenced[v.ID]
		g.mu.Unlock()
		verdict := liveness.FenceUnknown(lease, c)
		if verdict.Act != liveness.FenceIt {
			continue
		}
		if err := g.fence(ctx, v.ID, verdict.Reason); errors.Is(err, ports.ErrNotFound) {
			continue
		} else if err != nil {
			g.log.Error("fence failed; trying again", zap.String("volume", string(v.ID)), zap.Error(err))
			next = 100 * time.Millisecond
			continue
		}
		g.mu.Lock()
		g.fenced[v.ID] = liveness.Fence{Reason: verdict.Reason, Unknown: true}
		g.mu.Unlock()
	}
	return next
}

// Fenced says why volume id is fenced here ("" when it is not).
func (g *Guard) Fenced(id volume.ID) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fenced[id].Reason
}

func (g *Guard) fence(ctx context.Context, id volume.ID, reason string) error {
	info, err := g.store.GetVolume(ctx, id)
	if err != nil {
		return fmt.Errorf("fence %s: %w", id, err)
	}
	points, err := g.mounts.MountsOf(info.MountSource)
	if err != nil {
		return fmt.Errorf("fence %s: %w", id, err)
	}
	stopped, err := g.fencer.Fence(ctx, points, info.MountPath)
	if err != nil {
		return fmt.Errorf("fence %s: %w", id, err)
	}
	g.mu.Lock()
	delete(g.giveBack, id) // fenced again: nothing to give back yet
	g.mu.Unlock()
	msg := fmt.Sprintf("primary on %s fenced: %s; stopped %d writer(s) %v and removed its pods' mounts", g.cfg.Node, reason, len(stopped), stopped)
	g.log.Warn("primary fenced", zap.String("volume", string(id)), zap.String("reason", reason), zap.Any("stopped", stopped), zap.Strings("mounts", points))
	g.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "Fenced", Message: msg})
	return nil
}
