package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// Fencing lives in the daemon: a crashed volume manager does not disable
// it. Nor does a daemon that is down: the guard publishes its verdicts as
// the node's write permit (WithPermits), on which each primary's
// volume manager fences on its own (liveness.Watch, replication.Watchdog).
type Guard struct {
	cfg     Config
	clock   Clock
	lease   ports.NodeLease
	volumes *Volumes
	takers  *Takers
	store   Store
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
	recorded   map[volume.ID]string         // fenced by their volume manager's watchdog (its record), given back with giveBack
	// cleared is the last record of each volume whose pods were given
	// back: the same record read again (written once more by the same
	// fencing spell, after the give-back cleared it) restarts nothing.
	cleared   map[volume.ID]string
	overtaken map[volume.ID]bool // taken over under a read/write pod here: fence decided, not yet done (a passed deadline in the permit)
	// lapsed are the terms whose lease had run out when a renewal was
	// sent (liveness.Lapsed): fenced before they write again, and a
	// passed deadline in the permit until then.
	lapsed map[volume.ID]replica.Epoch

	// The node's write permit for the volume managers' watchdogs (nil:
	// none published). pubMu orders the publications.
	permits    ports.PermitPublisher
	records    ports.FenceRecords
	lock       ports.WriteLock // lifts a watchdog's lock on a copy given back
	pubMu      sync.Mutex
	published  bool                        // this process published a permit
	permit     liveness.Permit             // the last one it published, on its clock
	bounded    map[volume.ID]replica.Epoch // never Forever in these terms: a taker's acknowledgement is (or was) under way
	capped     map[volume.ID]ackCap        // held at the lease's end while an acknowledgement of new takers is under way (pubMu)
	pubFailing bool
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
func NewGuard(cfg Config, clock Clock, lease ports.NodeLease, volumes *Volumes, takers *Takers, store Store, mounts ports.MountTable, fencer ports.Fencer, effects ports.FailoverEffects, events ports.EventRecorder, log *zap.Logger, opts ...GuardOption) *Guard {
	g := newGuard(cfg, clock, lease, volumes, takers, store, mounts, fencer, effects, events, log)
	for _, o := range opts {
		o(g)
	}
	takers.BeforeClaim(g.beforeClaim)
	return g
}

// GuardOption adds an optional duty to a guard.
type GuardOption func(*Guard)

func newGuard(cfg Config, clock Clock, lease ports.NodeLease, volumes *Volumes, takers *Takers, store Store, mounts ports.MountTable, fencer ports.Fencer, effects ports.FailoverEffects, events ports.EventRecorder, log *zap.Logger) *Guard {
	return &Guard{cfg: cfg, clock: clock, lease: lease, volumes: volumes, takers: takers, store: store, mounts: mounts, fencer: fencer, effects: effects,
		events: events, log: log, renewed: make(chan struct{}, 1), fenced: map[volume.ID]liveness.Fence{}, giveBack: map[volume.ID]liveness.Fence{}, mine: map[volume.ID]bool{}, looked: map[volume.ID]bool{},
		recorded: map[volume.ID]string{}, cleared: map[volume.ID]string{}, overtaken: map[volume.ID]bool{}, bounded: map[volume.ID]replica.Epoch{}, capped: map[volume.ID]ackCap{}}
}

// WithPermits makes the guard publish, on this node, until when each
// primary here may write (liveness.Grant: its own verdicts) for the volume
// managers' watchdogs, which fence on it when this daemon is down
// (liveness.Watch); and give back the pods of the volumes they fenced
// (records) once they may write again, lifting the lock their fence left
// on the filesystem (lock) while this node is still the primary. From then on a taker is
// acknowledged (Takers) only while the node holds its lease and only once
// the permit bounds its volume by the lease; and a read/write publish
// (Takers.Claim) only once this process has published the permit.
func WithPermits(permits ports.PermitPublisher, records ports.FenceRecords, lock ports.WriteLock) GuardOption {
	return func(g *Guard) {
		g.permits, g.records, g.lock = permits, records, lock
		g.takers.BeforeAcknowledge(g.boundBeforeAcknowledge)
	}
}

// permitBeforeClaim refuses a read/write publish until this process has
// published the node's permit (liveness.Watch): a volume manager's
// watchdog arms only on a permit, so a pod writing a replicated volume
// here was published after there was one, which no daemon removes; its
// watchdog arms within its period, whatever happens to this daemon.
func (g *Guard) permitBeforeClaim() error {
	if g.permits == nil {
		return nil
	}
	g.pubMu.Lock()
	published := g.published
	g.pubMu.Unlock()
	if !published {
		g.publish() // a renewal answered since: publish now rather than at the next check
		g.pubMu.Lock()
		published = g.published
		g.pubMu.Unlock()
	}
	if !published {
		return errNoPermitYet
	}
	return nil
}

// beforeClaim refuses a read/write publish of volume id while the guard
// keeps it fenced here, or while the node may not write it (its lease
// not held, a taker's promise missing: liveness.Decide): a pod mounted
// then would write where the guard fences nothing more (a term is fenced
// once). Then, with permits, until the node's permit is published.
func (g *Guard) beforeClaim(id volume.ID) error {
	g.mu.Lock()
	f := g.fenced[id]
	g.mu.Unlock()
	if f.Fenced() {
		return fmt.Errorf("the node's guard keeps volume %s fenced here (%s): a pod mounts it once the node may write again", id, f.Reason)
	}
	if v := g.Writable(id); !v.MayWrite {
		return fmt.Errorf("the node may not write volume %s now: %s", id, v.Reason)
	}
	if g.records != nil {
		// A watchdog's fence not given back yet: a pod mounted now would
		// lift the lock under the processes it stopped, which the
		// give-back kills (with this pod's), then restarts the pods.
		recs, err := g.records.Recorded()
		if err != nil {
			return fmt.Errorf("the watchdogs' fence records of this node are not readable, so volume %s may be fenced here: %w", id, err)
		}
		if why, ok := recs[id]; ok {
			return fmt.Errorf("volume %s's watchdog fenced it here and the node's guard has not given its pods back yet (%s): a pod mounts it once it has", id, why)
		}
	}
	return g.permitBeforeClaim()
}

var errNoPermitYet = errors.New("this daemon has not published the node's write permit yet (its first renewal is not answered)")

// boundBeforeAcknowledge runs before a taker of volume id in epoch is
// recorded and acknowledged: the node must hold its lease, and the permit
// out there must bound the volume (no longer Forever), so that a daemon
// dying right after leaves a deadline at the lease's end, which passes 2
// Margin before the new taker may take over.
func (g *Guard) boundBeforeAcknowledge(id volume.ID, epoch replica.Epoch) error {
	g.mu.Lock()
	held := g.clock() < g.leaseUntil
	g.mu.Unlock()
	if !held {
		return errors.New("the node does not hold its lease: no taker is acknowledged before it renews")
	}
	g.pubMu.Lock()
	defer g.pubMu.Unlock()
	if e, ok := g.bounded[id]; !ok || e < epoch {
		g.bounded[id] = epoch
	}
	if !g.published {
		return errNoPermitYet // the permit out there is an earlier process's: it may hold id Forever
	}
	// Nor beyond the lease on its takers' promises (liveness.Decide): the
	// taker to come has promised nothing. Capped at the lease's end until
	// the ledger lists more takers than now (the acknowledgement's Intend,
	// just before its write).
	g.mu.Lock()
	until := g.leaseUntil
	g.mu.Unlock()
	if c, ok := g.capped[id]; !ok || c.epoch < epoch {
		g.capped[id] = ackCap{epoch: epoch, takers: len(g.takers.Of(id))}
	}
	if d := g.permit.Deadline(id); d != liveness.Forever && d <= until {
		return nil
	}
	return g.publishLocked()
}

// ackCap holds a volume's permit at the lease's end while an
// acknowledgement of more takers than it had is under way.
type ackCap struct {
	epoch  replica.Epoch
	takers int // the volume's takers when the acknowledgement began
}

// publish replaces the node's permit with the guard's verdicts now (once a
// renewal was answered: before, the permit out there is an earlier
// process's, whose deadlines still stand).
func (g *Guard) publish() {
	if g.permits == nil {
		return
	}
	g.mu.Lock()
	tried := g.tried
	g.mu.Unlock()
	if !tried {
		return
	}
	g.pubMu.Lock()
	err := g.publishLocked()
	failing := g.pubFailing
	g.pubFailing = err != nil
	g.pubMu.Unlock()
	switch {
	case err != nil && !failing:
		g.log.Error("the node's write permit was not published: the volume managers' watchdogs fence their primaries when the last one published runs out", zap.Error(err))
	case err == nil && failing:
		g.log.Info("the node's write permit is published again")
	}
}

// publishLocked publishes the guard's verdicts (pubMu held). Besides
// Grant's: a volume this guard keeps fenced (checkUnknown's, a term's) is
// never Forever, and one it is fencing because another node took it over
// under a read/write pod here (checkTakenOver) has a passed deadline
// until that fence is done, so that its watchdog fences too should this
// daemon die meanwhile.
func (g *Guard) publishLocked() error {
	all := g.volumes.All()
	g.takers.Learn(all...)
	terms := g.takers.Terms()
	judged := map[volume.ID]bool{}
	for _, t := range terms {
		judged[t.Volume] = true
	}
	g.mu.Lock()
	fenced := make(map[volume.ID]bool, len(g.fenced))
	for id := range g.fenced {
		fenced[id] = true
	}
	for id := range g.overtaken {
		if !g.volumes.Known(id) {
			delete(g.overtaken, id) // gone: a volume created again under its name starts anew
		}
	}
	g.mu.Unlock()
	var free, overtaken []volume.ID
	for _, st := range all {
		if e, ok := g.bounded[st.Volume]; ok && st.Epoch > e {
			delete(g.bounded, st.Volume) // a later term: its takers start anew
		}
		self, listed := st.Replica(g.cfg.Node)
		if !listed || !self.Active || st.Primary != g.cfg.Node {
			if g.overtakenNow(st.Volume) {
				overtaken = append(overtaken, st.Volume)
			}
			continue
		}
		g.mu.Lock()
		delete(g.overtaken, st.Volume) // the active primary here again
		g.mu.Unlock()
		if judged[st.Volume] || fenced[st.Volume] {
			continue
		}
		if _, ok := g.bounded[st.Volume]; ok {
			continue
		}
		free = append(free, st.Volume)
	}
	g.mu.Lock()
	standing := liveness.Standing{Now: g.clock(), LeaseUntil: g.leaseUntil, Promises: append([]liveness.Promise(nil), g.promises...)}
	g.mu.Unlock()
	p := g.cfg.Lease.Grant(standing, terms, free)
	for _, t := range terms {
		c, ok := g.capped[t.Volume]
		switch {
		case !ok:
		case t.Epoch != c.epoch || len(t.Takers) > c.takers:
			delete(g.capped, t.Volume) // the new takers are judged by Decide itself
		case standing.Now < standing.LeaseUntil && p.Deadline(t.Volume) > standing.LeaseUntil:
			p.Volumes[t.Volume] = standing.LeaseUntil
		}
	}
	g.mu.Lock()
	for id := range g.lapsed {
		overtaken = append(overtaken, id)
	}
	g.mu.Unlock()
	for _, id := range overtaken {
		if p.Deadline(id) > standing.Now {
			p.Volumes[id] = standing.Now // passed: the guard fences it now
		}
	}
	if err := g.permits.Publish(p, g.clock); err != nil {
		return err
	}
	g.published, g.permit = true, p
	return nil
}

// overtakenNow says whether the guard is fencing volume id as taken over
// under a read/write pod here.
func (g *Guard) overtakenNow(id volume.ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.overtaken[id]
}

// takeRecords hands the volumes their volume manager's watchdog fenced
// (its records) to giveBackPods once the permit lets them write again,
// unless this guard fences them itself, as the primary here or as an
// unknown copy (then its own give-back takes the record along, here once
// it is lifted). A guard's fence of a term that ended meanwhile (taken
// over while fenced) is given back by nothing: its record is given back
// as any other, which clears it without a restart (giveBackPods).
func (g *Guard) takeRecords() {
	if g.records == nil {
		return
	}
	recs, err := g.records.Recorded()
	if err != nil {
		g.log.Warn("the watchdogs' fence records were not read; their pods are given back later", zap.Error(err))
		return
	}
	known, here := map[volume.ID]bool{}, map[volume.ID]bool{}
	for _, st := range g.volumes.All() {
		self, listed := st.Replica(g.cfg.Node)
		known[st.Volume], here[st.Volume] = true, listed && self.Active && st.Primary == g.cfg.Node
	}
	g.pubMu.Lock()
	p, published := g.permit, g.published
	g.pubMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	for id, why := range recs {
		if g.cleared[id] == why {
			// This record was given back already: written again by the
			// same spell after the give-back cleared it. Cleared again,
			// nothing restarted.
			if err := g.records.Clear(id, why); err != nil {
				g.log.Warn("a watchdog's fence record was not cleared", zap.String("volume", string(id)), zap.Error(err))
			}
			continue
		}
		_, fenced := g.fenced[id]
		own := fenced && (here[id] || !known[id])
		if own || !published || now >= p.Deadline(id) || g.recorded[id] == why {
			continue
		}
		g.recorded[id] = why
		if _, ok := g.giveBack[id]; !ok {
			g.giveBack[id] = liveness.Fence{Reason: reasonWatchdog + why, Watchdog: true}
			g.log.Info("the node may write again", zap.String("volume", string(id)), zap.String("fenced because", why))
		}
	}
}

// WithPromises lets the guard ask, when a renewal fails, every node that
// could take a volume here over for its promise not to (without: never).
func WithPromises(a ports.PromiseAsker) GuardOption { return func(g *Guard) { g.asker = a } }

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
		if err := g.renewOrAsk(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
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

// renewOrAsk renews the lease once; a renewal still unanswered after half
// a period (an API server stalling) has the takers asked for their
// promises beside it, and one that failed has them asked once it failed:
// the promises are in before the lease runs out, however short it is.
func (g *Guard) renewOrAsk(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- g.RenewOnce(ctx) }()
	t := time.NewTimer(g.cfg.Lease.Renew / 2)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil && ctx.Err() == nil {
			g.AskPromisesOnce(ctx)
		}
		return err
	case <-t.C:
	}
	g.AskPromisesOnce(ctx)
	return <-done
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
	before := liveness.Standing{Now: sent, LeaseUntil: g.leaseUntil, Promises: append([]liveness.Promise(nil), g.promises...)}
	heldBefore := g.leaseUntil > 0 // this process held the lease once: a lapse is one of its leases
	if held := g.cfg.Lease.Held(sent); held > g.leaseUntil {
		g.leaseUntil = held
	}
	g.mu.Unlock()
	if heldBefore {
		for _, term := range g.takers.Terms() {
			if !liveness.Lapsed(before, term.Takers) {
				continue
			}
			g.mu.Lock()
			if f := g.fenced[term.Volume]; !f.Fenced() || !f.Holds(term.Epoch) { // fenced already: given back as any fence
				if g.lapsed == nil {
					g.lapsed = map[volume.ID]replica.Epoch{}
				}
				g.lapsed[term.Volume] = term.Epoch
			}
			g.mu.Unlock()
		}
	}
	g.publish() // the watchdogs learn of it at once, even while a check is busy fencing
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
			select { // each promise reaches the check (and the permit) at once, not after the slowest taker's
			case g.renewed <- struct{}{}:
			default:
			}
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
	// The watchdogs hear the verdicts first: before the fences below,
	// which may take long.
	g.publish()
	next = min(next, g.checkUnknown(ctx))
	next = min(next, g.checkTakenOver(ctx))
	g.takers.Learn(g.volumes.All()...)
	terms := g.takers.Terms()
	g.mu.Lock()
	for id, ep := range g.lapsed {
		if !slices.ContainsFunc(terms, func(t liveness.Term) bool { return t.Volume == id && t.Epoch == ep }) {
			delete(g.lapsed, id) // the term ended (taken over, or the primary moved): nothing of it to fence
		}
	}
	g.mu.Unlock()
	for _, term := range terms {
		id := term.Volume
		g.mu.Lock()
		was := g.fenced[id]
		if was.Fenced() && !was.Holds(term.Epoch) {
			// A fence of an earlier term, taken over while fenced: the
			// pods of that term were the survivor's to move; this term
			// is judged afresh.
			delete(g.fenced, id)
			was = liveness.Fence{}
		}
		done := was.Fenced()
		v := liveness.FenceOrGiveBack(g.standing(), term.Takers, done)
		if ep, ok := g.lapsed[id]; ok {
			switch {
			case ep != term.Epoch || done:
				delete(g.lapsed, id) // a later term, or fenced: given back as any fence
			case v.Act != liveness.FenceIt:
				v.GuardVerdict = liveness.GuardVerdict{Act: liveness.FenceIt,
					Reason: "the node's lease ran out before it was renewed again: another node may have taken the volume over meanwhile"}
			}
		}
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
		g.fenced[id] = liveness.Fence{Reason: v.Reason, Epoch: term.Epoch}
		delete(g.giveBack, id)
		delete(g.lapsed, id)
		g.mu.Unlock()
	}
	g.takeRecords() // by the permit published at the start: the watchdogs read it within their period, before a restarted pod is published
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
				g.clearRecord(id)
				continue
			}
		}
		if err == nil && v.FinishFence {
			err = g.finishWatchdogFence(ctx, id)
		}
		if err == nil && v.Unlock && g.lock != nil {
			// A watchdog's fence left the filesystem read-only.
			if err = g.lock.UnlockWrites(ctx, id); errors.Is(err, ports.ErrNotFound) {
				err = nil
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
		g.clearRecord(id)
		g.log.Info("pods of a volume no longer fenced restarted", zap.String("volume", string(id)), zap.Strings("pods", pods), zap.String("reason", v.Reason))
		g.events.Record(ctx, id, ports.Event{Type: ports.EventNormal, Reason: "Unfenced",
			Message: fmt.Sprintf("the fence of the copy on %s ended (%s; it was fenced because %s); its pods here %v were deleted so that their controllers start them again on the volume (a pod no controller owns must be restarted by hand: it sees an empty read-only directory)", g.cfg.Node, v.Reason, f.Reason, pods)})
	}
	return next
}

// finishWatchdogFence finishes a volume manager's watchdog's fence of id
// before its pods are restarted: the processes it stopped (SIGSTOP) are
// killed and the pods' targets covered, as the guard's own fence does.
func (g *Guard) finishWatchdogFence(ctx context.Context, id volume.ID) error {
	info, err := g.store.GetVolume(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	points, err := g.mounts.MountsOf(info.MountSource)
	if err != nil {
		return err
	}
	stopped, err := g.fencer.Fence(ctx, points, info.MountPath)
	if err != nil {
		return err
	}
	if len(stopped) > 0 {
		g.log.Info("the processes a watchdog stopped were killed before the pods restart", zap.String("volume", string(id)), zap.Any("killed", stopped))
	}
	return nil
}

// clearRecord removes the watchdog's record of id that takeRecords took
// (not one written since: that fence is still to give back).
func (g *Guard) clearRecord(id volume.ID) {
	g.mu.Lock()
	why, ok := g.recorded[id]
	delete(g.recorded, id)
	if ok {
		g.cleared[id] = why
	}
	g.mu.Unlock()
	if !ok || g.records == nil {
		return
	}
	if err := g.records.Clear(id, why); err != nil {
		g.log.Warn("a watchdog's fence record was not cleared; its pods may be restarted once more", zap.String("volume", string(id)), zap.Error(err))
	}
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
			delete(g.overtaken, st.Volume)
			g.mu.Unlock()
			continue
		}
		g.looked[st.Volume] = true
		g.mu.Unlock()
		err := g.carryTakenOver(ctx, in)
		if err == nil {
			// Looked at: fenced, or nothing to fence: the permit's passed
			// deadline for it goes.
			g.mu.Lock()
			delete(g.overtaken, st.Volume)
			g.mu.Unlock()
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
			if err := g.fenceTakenOver(ctx, id, v.Reason); err != nil && !errors.Is(err, ports.ErrNotFound) {
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

// fenceTakenOver fences volume id, taken over under a read/write pod
// here, after publishing a passed deadline for it (the watchdogs hear the
// verdict first, as for a term the guard fences: a daemon dying during
// the fence leaves its volume manager's watchdog fencing); the deadline
// stays passed until a look at the volume ends without an error (its
// fence done, or nothing left to fence).
func (g *Guard) fenceTakenOver(ctx context.Context, id volume.ID, reason string) error {
	g.mu.Lock()
	marked := g.overtaken[id]
	g.overtaken[id] = true
	g.mu.Unlock()
	if !marked {
		g.publish()
	}
	return g.fence(ctx, id, reason)
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

// reasonWatchdog begins the give-back's reason of a volume its watchdog
// fenced (takeRecords).
const reasonWatchdog = "its volume manager's watchdog fenced it: "

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
	g.unloadKey(ctx, id, info)
	return nil
}

// keyUnloader is the part of a store that closes an encrypted volume
// (ports.SnapshotStore.UnloadKey); a store without it has none.
type keyUnloader interface {
	UnloadKey(ctx context.Context, id volume.ID) error
}

// unloadKey unloads, after a fence removed its pods' mounts, the key of a
// Ferry-encrypted volume whose key is loaded here: the node keeps only
// ciphertext once it no longer serves the volume. Best effort, logged (a
// key that stays loaded is unloaded by the pods' unpublish). Nothing for
// any other volume.
func (g *Guard) unloadKey(ctx context.Context, id volume.ID, info ports.VolumeInfo) {
	v, err := volume.DecideSend(info.Metadata[ports.MetaEncryption], info.Encryption)
	if err != nil || !v.Raw || !info.Encryption.KeyLoaded {
		return
	}
	u, ok := g.store.(keyUnloader)
	if !ok {
		return
	}
	if err := u.UnloadKey(context.WithoutCancel(ctx), id); err != nil {
		g.log.Warn("fenced, but the encryption key was not unloaded: it stays loaded on this node", zap.String("volume", string(id)), zap.Error(err))
		return
	}
	g.log.Info("fenced: encryption key unloaded", zap.String("volume", string(id)))
}
