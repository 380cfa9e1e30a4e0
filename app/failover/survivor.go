package failover

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Survivor watches every node's lease from this node and takes over the
// volumes this node is the successor of when their primary's node is lost
// (liveness.Observer, liveness.Takeovers): not a single controller pod,
// which may be on the lost node. The takeover itself is a compare-and-swap
// (replica.Takeover: epoch + 1, refused when another replica is newer), so
// two survivors deciding at once cannot both win; then the lost node's
// placement of the volume is removed, the node tainted, its replica pods
// of the volume force-deleted (the workload counted them as running), and
// its pods that use the volume too, so their controller recreates them
// here.
type Survivor struct {
	cfg     Config
	clock   Clock
	leases  ports.NodeLeases
	cluster ports.ClusterState
	view    *Volumes
	store   Store
	effects ports.FailoverEffects
	events  ports.EventRecorder
	log     *zap.Logger

	mu      sync.Mutex
	obs     *liveness.Observer
	peers   map[replica.Node]string
	pending map[liveness.Owed]liveness.Aftermath // effects on a lost node not all done
	handled map[liveness.Owed]bool               // effects done since the node was lost
	lost    map[replica.Node]bool                // last logged
	// nodeFenced are the lost nodes fenced from outside since their loss.
	nodeFenced map[replica.Node]bool
	taint      *liveness.TaintWatch
	kept       string // the last reason the own taint stayed, as logged
	prepare    Preparer
	// predecessor and inherited: WithPredecessor, applied at the first
	// read of the leases.
	predecessor func() time.Duration
	inherited   bool
}

// Preparer readies this node's copy for the writer that follows a
// takeover here (publish.Service.PrepareWriter: the remount a publish would
// otherwise make before the pod starts).
type Preparer interface {
	PrepareWriter(ctx context.Context, id volume.ID) error
}

// SurvivorOption adds an optional duty to a survivor.
type SurvivorOption func(*Survivor)

// WithPredecessor tells the survivor the lease duration the daemon it
// replaced on this node ran on (0: none, or not known yet): at its first
// read of the leases it waits out the promises that daemon may have given
// (liveness.Observer.Inherit), on the longer of that and what its own
// node's Lease then declares.
func WithPredecessor(d func() time.Duration) SurvivorOption {
	return func(s *Survivor) { s.predecessor = d }
}

// WithPreparer has every takeover made here followed, at once and beside
// the lost node's effects, by p's preparation of the copy.
func WithPreparer(p Preparer) SurvivorOption { return func(s *Survivor) { s.prepare = p } }

// NewSurvivor returns the survivor of cfg.Node.
//
// view is the daemon's view of every volume (nil: none): the primaries'
// resume counters are read from it before each read of the leases, so
// that a takeover decided on a lease verdict is refused when the lost
// primary resumed since (liveness.ResumedSince).
func NewSurvivor(cfg Config, clock Clock, leases ports.NodeLeases, cluster ports.ClusterState, view *Volumes, store Store, effects ports.FailoverEffects, events ports.EventRecorder, log *zap.Logger, opts ...SurvivorOption) *Survivor {
	if view == nil {
		view = NewVolumes()
	}
	s := &Survivor{cfg: cfg, clock: clock, leases: leases, cluster: cluster, view: view, store: store, effects: effects, events: events, log: log,
		obs: liveness.NewObserver(cfg.Lease, cfg.Node), peers: map[replica.Node]string{}, pending: map[liveness.Owed]liveness.Aftermath{}, handled: map[liveness.Owed]bool{}, lost: map[replica.Node]bool{}, nodeFenced: map[replica.Node]bool{},
		taint: liveness.NewTaintWatch(cfg.Taint.WithDefaults(cfg.Lease), cfg.Node)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Run reads the leases every Renew and acts on what it finds until ctx
// ends.
//
// A node whose lease stops changing is read again at the instant it may
// be taken for lost (liveness.Observer.NextLoss), not at the next period:
// up to a period sooner, at one read more per loss.
func (s *Survivor) Run(ctx context.Context) {
	for {
		start := s.clock()
		if err := s.Step(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("failover check incomplete", zap.Error(err))
		}
		if took := s.clock() - start; took > s.cfg.Lease.Renew {
			// A loss (or an out-of-service taint) is seen only by a step:
			// one longer than a period delays every takeover.
			s.log.Warn("failover check slow", zap.Duration("took", took), zap.Duration("period", s.cfg.Lease.Renew))
		}
		wait := s.nextStep(start)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// nextStep is how long after a step begun at start the next one waits: a
// period, or less when a node may be taken for lost sooner.
func (s *Survivor) nextStep(start time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	next := start + s.cfg.Lease.Renew
	if at, ok := s.obs.NextLoss(now); ok && at < next {
		next = at
	}
	return max(next-now, time.Millisecond)
}

// Promise answers node's request for a promise not to take its volumes
// over (see liveness.Observer.Promise).
func (s *Survivor) Promise(node replica.Node) (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.obs.Promise(node, s.clock())
}

// PeerAddress is node's peer address as its lease last said, known
// although the API server cannot be read now.
func (s *Survivor) PeerAddress(node replica.Node) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.peers[node]
	return a, ok && a != ""
}

// Step reads the leases once, takes over what this node must, carries out
// the effects still owed, and checks this node's own fenced taint when
// due (liveness.TaintWatch), lifting it as liveness.LiftTaint says.
func (s *Survivor) Step(ctx context.Context) error {
	// The states as known before this read of the leases: a primary
	// resumed after them (replica.Resume) outlived the verdict below.
	before := map[volume.ID]replica.State{}
	for _, st := range s.view.All() {
		before[st.Volume] = st
	}
	asked := s.clock() // a lease read held long counts as blind (liveness.Observer.ReadSince)
	recs, err := s.leases.Leases(ctx)
	answered := s.clock()
	var off []replica.Node
	if err == nil {
		off, err = s.effects.OutOfService(ctx)
	}
	s.mu.Lock()
	now := s.clock()
	if err != nil {
		s.obs.Blind()
		s.mu.Unlock()
		return fmt.Errorf("read the nodes' leases: %w", err)
	}
	values := make(map[replica.Node]liveness.Lease, len(recs))
	for n, r := range recs {
		values[n] = liveness.Lease{Value: r.Value, Duration: r.Duration}
		s.peers[n] = r.PeerAddress
	}
	s.obs.ReadDeclared(asked, answered, values)
	if !s.inherited {
		// The node's own Lease, read before this daemon renewed it, says
		// its predecessor's terms; after, the publisher does.
		d := values[s.cfg.Node].Duration
		if s.predecessor != nil {
			d = max(d, s.predecessor())
		}
		s.obs.Inherit(now, d)
		s.inherited = true
	}
	s.obs.OutOfService(off)
	lost := s.obs.Lost(now)
	s.logLost(lost, off)
	checkTaint := s.taint.Due(now, s.obs.Renewing(s.cfg.Node, now))
	s.mu.Unlock()

	var errs []error
	if len(lost) > 0 {
		states, err := s.localStates(ctx)
		if err != nil {
			errs = append(errs, err)
		}
		for _, t := range liveness.Takeovers(states, lost, s.cfg.Node, s.cfg.Lag) {
			if err := s.fenceNode(ctx, t); err != nil {
				errs = append(errs, err)
				continue
			}
			errs = append(errs, s.takeOver(ctx, t, before[t.Volume.Volume]))
		}
		// What the state says is owed, whoever took over and whenever
		// (this daemon may have restarted between its compare-and-swap
		// and the effects): every lost node listed in a volume whose
		// active primary is here, once per loss.
		s.mu.Lock()
		for _, o := range liveness.OwedOnLoss(states, lost, s.cfg.Node, s.handled) {
			s.pending[o] = s.pending[o].With(liveness.UnplaceTaintEvict)
		}
		s.mu.Unlock()
	}
	errs = append(errs, s.effectsOwed(ctx))
	if checkTaint {
		errs = append(errs, s.liftOwnTaint(ctx, now))
	}
	return errors.Join(errs...)
}

func (s *Survivor) logLost(lost, off []replica.Node) {
	now := map[replica.Node]bool{}
	for _, n := range lost {
		now[n] = true
		switch {
		case s.lost[n]:
		case slices.Contains(off, n):
			s.log.Warn("node lost: declared shut down (the out-of-service taint)", zap.String("node", string(n)))
		default:
			s.log.Warn("node lost: its lease has not changed for the lease duration plus the margin", zap.String("node", string(n)))
		}
	}
	for n := range s.lost {
		if !now[n] {
			s.log.Info("node renews its lease again", zap.String("node", string(n)))
			for o := range s.handled {
				if o.Node == n {
					delete(s.handled, o) // a later loss is handled again
				}
			}
			delete(s.nodeFenced, n) // and fenced again
		}
	}
	s.lost = now
}

// localStates reads, fresh, the state of every volume with a copy here:
// only those can this node take over.
func (s *Survivor) localStates(ctx context.Context) ([]replica.State, error) {
	vols, err := s.store.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list local volumes: %w", err)
	}
	var out []replica.State
	var errs []error
	for _, v := range vols {
		st, err := s.cluster.Get(ctx, v.ID)
		switch {
		case errors.Is(err, ports.ErrNotFound):
		case err != nil:
			errs = append(errs, err)
		default:
			out = append(out, st)
		}
	}
	return out, errors.Join(errs...)
}

// fenceNode fences t's lost node from outside before its volume is taken
// over, when liveness.FenceNodeFirst says so (Config.FenceNode).
func (s *Survivor) fenceNode(ctx context.Context, t liveness.Takeover) error {
	s.mu.Lock()
	first := liveness.FenceNodeFirst(t, s.cfg.FenceNode != nil, s.nodeFenced[t.Lost])
	s.mu.Unlock()
	if !first {
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, nodeFenceTimeout)
	defer cancel()
	if err := s.cfg.FenceNode.FenceNode(fctx, t.Lost); err != nil {
		s.events.Record(ctx, t.Volume.Volume, ports.Event{Type: ports.EventWarning, Reason: "NodeFenceFailed",
			Message: fmt.Sprintf("node %s, lost, could not be fenced before the takeover of its volumes (retried): %v", t.Lost, err)})
		return fmt.Errorf("fence lost node %s before the takeover of %s: %w", t.Lost, t.Volume.Volume, err)
	}
	s.mu.Lock()
	s.nodeFenced[t.Lost] = true
	s.mu.Unlock()
	s.log.Warn("lost node fenced before the takeover", zap.String("node", string(t.Lost)))
	s.events.Record(ctx, t.Volume.Volume, ports.Event{Type: ports.EventWarning, Reason: "NodeFenced",
		Message: fmt.Sprintf("node %s, lost, was fenced before its volumes were taken over", t.Lost)})
	return nil
}

// nodeFenceTimeout bounds one attempt of the configured node fence.
const nodeFenceTimeout = 60 * time.Second

func (s *Survivor) takeOver(ctx context.Context, t liveness.Takeover, before replica.State) error {
	id := t.Volume.Volume
	var lost liveness.GivenUp
	st, err := s.cluster.Update(ctx, id, func(st *replica.State) error {
		var err error
		lost, err = liveness.ApplyTakeover(st, before, t, s.cfg.Node, s.cfg.Lag)
		return err
	})
	final, from := lost.Final, lost.From
	if err != nil {
		if liveness.TakeoverRefused(err) {
			// Another survivor won, or the fresh state says this node may
			// not: the compare-and-swap is the arbiter.
			s.log.Info("takeover not made", zap.String("volume", string(id)), zap.String("lost", string(t.Lost)), zap.Bool("released", t.Released), zap.Error(err))
			return nil
		}
		return fmt.Errorf("take %s over from %s: %w", id, t.Lost, err)
	}
	if t.Released {
		// The loss is named: the final snapshot the release recorded (and
		// every one after the successor's) lives only on the lost node.
		s.log.Warn("took over a released volume whose final snapshot only a lost node holds", zap.String("volume", string(id)), zap.String("lost", string(t.Lost)),
			zap.Uint64("epoch", uint64(st.Epoch)), zap.String("final", replica.SnapshotName(final)), zap.String("from", replica.SnapshotName(from)))
		s.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "FinalSnapshotLost",
			Message: fmt.Sprintf("node %s released the volume and was lost (its lease ran out) holding the only copy of its final snapshot %s: the volume goes on from %s on %s (epoch %d, no active primary: the next publish promotes a replica), and the writes after it up to %s are given up; when %s returns, its copy is kept aside (FencedWritesKept) before it resyncs",
				t.Lost, replica.SnapshotName(final), replica.SnapshotName(from), s.cfg.Node, st.Epoch, replica.SnapshotName(final), t.Lost)})
	} else {
		s.log.Warn("took over a volume from a lost node", zap.String("volume", string(id)), zap.String("lost", string(t.Lost)), zap.Uint64("epoch", uint64(st.Epoch)))
		if s.prepare != nil {
			// Beside the effects (the pods' deletion): it overlaps their
			// rescheduling. The publish waits for it, or does it itself.
			go func() {
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if err := s.prepare.PrepareWriter(pctx, id); err != nil {
					s.log.Info("copy not prepared for its writer after the takeover: the publish does it", zap.String("volume", string(id)), zap.Error(err))
				}
			}()
		}
		s.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "TookOver",
			Message: fmt.Sprintf("node %s took over as primary (epoch %d) from %s, whose lease ran out; writes after its last replicated snapshot are given up", s.cfg.Node, st.Epoch, t.Lost)})
	}
	o := liveness.Owed{Volume: id, Node: t.Lost}
	s.mu.Lock()
	s.pending[o] = s.pending[o].With(liveness.AftermathOf(t))
	s.mu.Unlock()
	return nil
}

// effectsOwed carries out, for every takeover made, what the lost node
// still owes (liveness.Aftermath.Steps): no placement there, the taint,
// its replica pods and then its pods using the volume deleted. Each step
// is idempotent; a failed one is retried at the next Step.
func (s *Survivor) effectsOwed(ctx context.Context) error {
	s.mu.Lock()
	todo := make(map[liveness.Owed]liveness.Aftermath, len(s.pending))
	for o, e := range s.pending {
		todo[o] = e
	}
	s.mu.Unlock()
	var errs []error
	for o, owe := range todo {
		id, n := o.Volume, o.Node
		var pods, replicas []string
		var err error
		for _, step := range owe.Steps() {
			switch step {
			case liveness.Unplace:
				err = s.effects.Unplace(ctx, n, id)
			case liveness.TaintNode:
				err = s.effects.Taint(ctx, n, true)
			case liveness.RemoveReplicaPods:
				replicas, err = s.effects.RemoveReplicaPods(ctx, n, id)
			case liveness.EvictPods:
				pods, err = s.effects.EvictPods(ctx, n, id)
			}
			if err != nil {
				break
			}
		}
		if len(replicas) > 0 {
			// Logged even when a later step failed: they are gone.
			s.log.Warn("force-deleted the lost node's replica pods of a volume", zap.String("volume", string(id)), zap.String("lost", string(n)), zap.Strings("pods", replicas))
			s.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "ReplicaPodsRemoved",
				Message: fmt.Sprintf("force-deleted %v, the volume's replica pods on lost node %s: counted as running they would hold the ReplicaSet's places; it replaces its own where there is room, and %s's copy, when the node returns, leaves if surplus (its fenced writes kept aside first) or gets its pod again", replicas, n, n)})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("after taking %s over from %s: %w", id, n, err))
			continue
		}
		if len(pods) > 0 {
			s.log.Warn("force-deleted the lost node's pods of a volume taken over", zap.String("volume", string(id)), zap.String("lost", string(n)), zap.Strings("pods", pods))
			s.events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "PodsEvicted",
				Message: fmt.Sprintf("force-deleted %v on lost node %s (tainted %s) so that their controllers start them on %s", pods, n, ports.FencedTaint, s.cfg.Node)})
		}
		s.mu.Lock()
		if s.pending[o] == owe { // not raised to more effects meanwhile
			delete(s.pending, o)
			s.handled[o] = true
		}
		s.mu.Unlock()
	}
	return errors.Join(errs...)
}

// liftOwnTaint reads whether this node carries its fenced taint and, if
// so, its copies (their states and the pool's newest replication
// snapshots), asks liveness.LiftTaint, and carries the verdict out: the
// taint lifted, each copy that did not hold it reported on its volume.
func (s *Survivor) liftOwnTaint(ctx context.Context, now time.Duration) error {
	tainted, err := s.effects.Tainted(ctx, s.cfg.Node)
	if err != nil {
		return err
	}
	if !tainted {
		s.mu.Lock()
		s.taint.Untainted()
		s.kept = ""
		s.mu.Unlock()
		return nil
	}
	copies, err := s.localCopies(ctx)
	if err != nil {
		return err // a copy unread may hold what its primary lacks
	}
	s.mu.Lock()
	v := s.taint.Tainted(now, copies)
	said := s.kept
	if !v.Lift {
		s.kept = v.Reason
	}
	s.mu.Unlock()
	if !v.Lift {
		if v.Reason != said {
			fields := []zap.Field{zap.String("reason", v.Reason)}
			for _, c := range v.Waiting {
				fields = append(fields, zap.String(string(c.Volume), c.Why))
			}
			s.log.Info("fenced taint kept", fields...)
		}
		return nil
	}
	if err := s.effects.Taint(ctx, s.cfg.Node, false); err != nil {
		return err
	}
	s.log.Info("fenced taint removed", zap.String("reason", v.Reason))
	for _, c := range v.Unready {
		s.events.Record(ctx, c.Volume, ports.Event{Type: ports.EventWarning, Reason: "TaintLiftedCopyNotReady",
			Message: fmt.Sprintf("node %s's fenced taint (%s) was lifted although its copy is %s; it holds nothing the primary lacks, so it does not hold the node: it gets no placement label until it catches up (its volume manager's events say what stops it: a full pool, a conflict for an operator)", s.cfg.Node, ports.FencedTaint, c.Why)})
	}
	for _, c := range v.Waiting {
		s.events.Record(ctx, c.Volume, ports.Event{Type: ports.EventWarning, Reason: "TaintLiftedFencedCopy",
			Message: fmt.Sprintf("node %s's fenced taint (%s) was lifted after the longest wait although its copy %s; those writes stay until its volume manager keeps them aside (FencedWritesKept, or FencedWritesNotKept without room) and rolls back: an operator may have to make room or mend the volume manager", s.cfg.Node, ports.FencedTaint, c.Why)})
	}
	return nil
}

// localCopies reads, fresh, every local copy as the taint rule needs it:
// its volume's state, and the newest replication snapshot the pool holds
// of it (which a cut-off primary may not have reported).
func (s *Survivor) localCopies(ctx context.Context) ([]liveness.LocalCopy, error) {
	states, err := s.localStates(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := s.store.ListSnapshots(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list local snapshots: %w", err)
	}
	pool := map[volume.ID]replica.Snap{}
	for _, sn := range snaps {
		n, e, ok := replica.ParseSnapshotName(sn.Name)
		if h := (replica.Snap{Number: n, Epoch: e, GUID: sn.GUID}); ok && h.Newer(pool[sn.Volume]) {
			pool[sn.Volume] = h
		}
	}
	out := make([]liveness.LocalCopy, 0, len(states))
	for _, st := range states {
		out = append(out, liveness.LocalCopy{State: st, Pool: pool[st.Volume]})
	}
	return out, nil
}
