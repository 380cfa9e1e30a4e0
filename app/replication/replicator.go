package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Config configures one replica's volume manager.
type Config struct {
	Node   replica.Node
	Volume volume.ID
	// Tick is how often the replica re-reads the shared state and decides.
	Tick time.Duration
	// SnapshotInterval is how often the primary snapshots when the
	// volume's state sets no interval of its own (its spec's, read with
	// the state: replica.State.SnapshotInterval).
	SnapshotInterval time.Duration
	// AllowedLag is how many snapshots behind the newest a replica may be
	// and still be ready.
	AllowedLag uint64
	// Keep is how many newest snapshots each replica keeps.
	Keep int
	// MaxTransferRate limits each transfer this replica receives, in bytes
	// per second (0: unlimited), so that a first sync does not take a
	// node's disk or network from its workloads.
	MaxTransferRate int64
	// Accept is what this node's pool takes beyond a plain stream
	// (compressed, large-block, embedded): asked of every peer it
	// fetches from, which adds what its own pool can send.
	Accept volume.StreamFeatures
	// Clock paces rate-limited transfers; nil is the system clock.
	Clock Clock
	// Resync is how often an idle replica re-reads everything without
	// being told of a change (0: DefaultResync); see Run.
	Resync time.Duration
	// Poll re-reads every tick even when the shared state can watch (the
	// behaviour of stores that cannot; for comparisons).
	Poll bool
}

// Replicator is the volume-manager use case: it feeds the replica machine
// (domain/replica) what it observes in the store and the shared state, and
// carries out the machine's actions: reports, transfers from peers,
// rollbacks, snapshots, retention and the safe-deletion protocol.
type Replicator struct {
	cfg       Config
	store     Store
	cluster   SharedState
	transport ports.Transport
	events    ports.EventRecorder
	log       *zap.Logger
	m         *replica.Machine

	snapshotNow atomic.Bool // set by SnapshotNow, consumed by Run's goroutine
	// wake ends Run's wait at once when a request arrives (holds one).
	wake chan struct{}
	// terminating is set by Terminate (after Run returned): a state that
	// no longer exists then means the volume is gone, and the leave
	// proceeds instead of waiting for a state.
	terminating bool
	// stale: the last read of the shared state failed (not its absence):
	// the machine decides on its last view (replica.StateUnreadable).
	// Only Run's goroutine (and Terminate's, after Run) touch it.
	stale bool
	// roundStale: this settle round already found the state unreadable.
	roundStale bool

	mu     sync.Mutex
	status Status
	// requests are publish events for the machine, in order (Acquire,
	// Abandon, Release), stepped by Run's goroutine.
	requests []replica.Event
	// acquirers counts the Acquire calls waiting: the last one to give up
	// abandons the acquisition.
	acquirers int
	// statusChanged is closed and replaced whenever status is updated.
	statusChanged chan struct{}
	// promoting: a BecomePrimary decided and not yet done (set under mu
	// in the same critical section as the decision, so that an Acquire
	// giving up either abandons before the decision or sees it);
	// promotions counts those that succeeded.
	promoting  bool
	promotions uint64
	transfer   *Progress
	// lastBlocked is the last DiscardBlocked message raised.
	lastBlocked string
	// lastKept is the last FencedWritesKept or FencedWritesNotKept
	// message raised: a retried rollback does not raise it again.
	lastKept string
	// peerSizes maps the GUIDs of the last peer listing to their sizes:
	// the estimate of a full stream's length, for the ETA.
	peerSizes map[uint64]int64
	// takenAt maps the GUIDs of the local replication snapshots to when
	// they were taken (Unix seconds), from the last listing and the
	// snapshots taken since: what a report says of its snapshot's age.
	takenAt map[uint64]int64
	// observed: a state of the volume was read since the start.
	observed bool

	// onChange, when set, is called on each change the watch tells of,
	// from the watch's goroutine: a peer action under way checks whether
	// the state ended its term (execWatched).
	changeMu sync.Mutex
	onChange func()
	// changes counts the changes the watch told of; observedChanges is
	// the count when observe last read the state (a change after it may
	// be missing from the view the next action is decided on).
	changes         atomic.Uint64
	observedChanges uint64
	// transportCtx, set while execWatched runs a peer action, is the
	// context of its calls to the peer (peerCtx): cancelled when the
	// peer's term ended, it stops the transfer, never the local steps.
	transportCtx context.Context

	// pace decides when the loop settles; begun: it is set up. Only
	// the stepping goroutine touches them (Step).
	pace  replica.Pace
	begun bool
}

// TransferStatus is a snapshot of a transfer's progress. EstimatedBytes
// and ETA are known for full streams (the snapshot's size); zero otherwise.
type TransferStatus struct {
	Peer, Snapshot string
	Bytes          int64
	EstimatedBytes int64
	BytesPerSecond float64
	ETA            time.Duration
	Started        time.Time
}

// Status is what the replica reports about itself (for logs, a status
// endpoint and metrics).
type Status struct {
	Snapshot replica.SnapshotNumber
	Epoch    replica.Epoch
	Ready    bool
	Primary  bool
	// Transfer is the transfer in progress, if any.
	Transfer *TransferStatus
	// LastError is the last action's failure, cleared by a success.
	LastError string
	// Released: a Release finished (final snapshot recorded, not active).
	Released bool
	// Acquired: an Acquire finished (this replica became the active
	// primary by compare-and-swap and no Release came since).
	Acquired bool
	// Acquiring: an Acquire is under way; Waiting says for what, when the
	// machine knows ("" when for nothing but its own next steps).
	Acquiring bool
	Waiting   string
	// StaleView: the last read of the shared state failed (the API
	// server is away, or this node is cut off from it): the replica acts
	// on its last view (a primary snapshots, a secondary fetches from it;
	// nothing is recorded until the state reads again), and Snapshot,
	// Epoch and Ready above are that view's.
	StaleView bool
	// Volume is what the last view of the shared state says of the whole
	// volume (what `kubectl get rv` shows), and ReplicationFactor the
	// copies it asks for.
	Volume            replica.Summary
	ReplicationFactor int
	// Behind is how many snapshots this copy is behind the volume's
	// newest, and HoldsNewest whether it holds that one (replica.LagOf).
	Behind      replica.SnapshotNumber
	HoldsNewest bool
	// NewestTaken is when the newest replication snapshot this copy holds
	// was taken (on the primary: a received snapshot keeps its time);
	// zero while it holds none, or before its store was read.
	NewestTaken time.Time
	// Totals count what this volume manager did since it started.
	Totals Totals
}

// Totals count a volume manager's work since it started.
type Totals struct {
	SnapshotsTaken uint64
	// Transfers ended, and of those that failed; their bytes and the
	// seconds they took (failed ones included).
	Transfers, TransferFailures uint64
	TransferredBytes            int64
	TransferSeconds             float64
}

// New returns the volume manager of cfg.Volume's replica on
// cfg.Node.
func New(cfg Config, store Store, cluster SharedState, transport ports.Transport, events ports.EventRecorder, log *zap.Logger) *Replicator {
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	every := 1
	if cfg.Tick > 0 && cfg.SnapshotInterval > cfg.Tick {
		every = int((cfg.SnapshotInterval + cfg.Tick - 1) / cfg.Tick)
	}
	return &Replicator{
		cfg: cfg, store: store, cluster: cluster, transport: transport, events: events,
		log:  log.With(zap.String("volume", string(cfg.Volume))),
		wake: make(chan struct{}, 1), statusChanged: make(chan struct{}),
		m: replica.NewMachine(replica.MachineConfig{Self: cfg.Node, AllowedLag: cfg.AllowedLag, Keep: cfg.Keep, SnapshotEvery: every, Tick: cfg.Tick}),
	}
}

// Secondary reports whether the replica is known to be no active
// primary: a state was read since the start and shows another primary or
// none, and no acquisition is under way or done (its pod may be mounted
// before the next read shows the promotion). Unknown is not secondary.
func (r *Replicator) Secondary() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.observed && !r.status.Primary && !r.status.Acquired && !r.status.Acquiring && !r.promoting
}

// Observed reports whether the replicator has read the volume's state
// since it started (before, Secondary cannot tell a secondary from a
// primary).
func (r *Replicator) Observed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.observed
}

// Status returns a copy of the replica's status.
func (r *Replicator) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.status
	if p := r.transfer; p != nil {
		s.Transfer = &TransferStatus{Peer: p.Peer, Snapshot: p.Snapshot, Bytes: p.Bytes(), EstimatedBytes: p.Total,
			BytesPerSecond: p.Rate(), ETA: p.ETA(), Started: p.Started}
	}
	return s
}

// Run decides and acts until ctx ends. With a shared state that can
// watch (ports.StateWatcher), an idle replica reads nothing: it decides
// again only when told of a change, when the machine's Wake says (the
// primary's next snapshot), on a request, or every Resync; otherwise, and
// while work is in progress, it re-reads and decides every tick
// (replica.Pace decides when). Run feeds Step what wakes it; Run may be
// called again after it returned, and goes on where it stopped.
func (r *Replicator) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Tick)
	defer t.Stop()
	changes := r.watch(ctx)
	r.begin()
	r.pace.Watching(changes != nil)
	r.log.Info("volume manager started", zap.Duration("tick", r.cfg.Tick), zap.Duration("snapshotInterval", r.cfg.SnapshotInterval),
		zap.Int64("maxTransferRate", r.cfg.MaxTransferRate), zap.Bool("watch", changes != nil), zap.Duration("resync", r.resync()))
	r.pace.Changed() // a (re)start reads afresh: changes may have come unwatched
	r.Step(ctx, Requested)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.Step(ctx, Tick)
		case _, open := <-changes:
			if !open {
				if ctx.Err() != nil {
					return nil // the watch ends with Run: the pace stays as it was, for the next Run
				}
				changes = nil // the watch ended on its own: poll every tick
				r.pace.Watching(false)
			}
			r.Step(ctx, Changed)
		case <-r.wake:
			r.Step(ctx, Requested)
		}
	}
}

// Input is what wakes a volume manager's loop (Step).
type Input int

const (
	// Tick: Config.Tick passed.
	Tick Input = iota
	// Changed: the watch of the shared state told of a change.
	Changed
	// Requested: a request may have arrived (SnapshotNow, Acquire,
	// Release), or the loop starts.
	Requested
)

// Step feeds the loop one input, steps the requests that arrived, and
// settles when the pace says (replica.Pace). Run calls it for every
// input; a test may call it itself, between runs, to replay a sequence
// on its own clock. Only one goroutine may step at a time (Run's, or the
// caller's while Run is not running).
func (r *Replicator) Step(ctx context.Context, in Input) {
	r.begin()
	switch in {
	case Tick:
		_ = r.m.Step(replica.Tick{})
		r.pace.Tick()
		if r.pace.BackingOff() && r.stale && r.readable(ctx) {
			r.pace.ViewReturned()
		}
	case Changed:
		r.pace.Changed()
	case Requested:
		// A start, or a wake that the requests below may explain; a
		// wake with no request settles only when otherwise due.
	}
	r.mu.Lock()
	reqs := r.requests
	r.requests = nil
	r.mu.Unlock()
	for _, ev := range reqs {
		_ = r.m.Step(ev)
		r.pace.Requested()
	}
	if r.snapshotNow.Swap(false) {
		_ = r.m.Step(replica.SnapshotNow{})
		r.pace.Requested()
	}
	if settle, full := r.pace.Next(r.m.Wake(), r.stale, r.m.SnapshotEvery()); settle {
		failed, incomplete := r.settle(ctx, full)
		r.pace.Settled(failed, incomplete)
	}
}

// begin sets up the pace once (the first Run or Step).
func (r *Replicator) begin() {
	if r.begun {
		return
	}
	r.begun = true
	r.pace = replica.NewPace(max(1, int(r.resync()/r.cfg.Tick)), false)
}

func (r *Replicator) resync() time.Duration {
	if r.cfg.Resync > 0 {
		return r.cfg.Resync
	}
	return DefaultResync
}

// DefaultResync is how often an idle replica re-reads everything although
// nothing told it of a change: the bound on what a lost notification or a
// store changed behind Ferry's back could cost.
const DefaultResync = 5 * time.Minute

// watch starts the shared state's watch of this volume, or returns nil
// (poll every tick) when the store cannot watch or the watch fails.
func (r *Replicator) watch(ctx context.Context) <-chan struct{} {
	if r.cfg.Poll {
		return nil
	}
	ch, err := r.cluster.Watch(ctx, r.cfg.Volume)
	if err != nil {
		r.log.Warn("cannot watch the volume's state; reading it every tick", zap.Error(err))
		return nil
	}
	// Each change is told to a peer action under way first (the loop is
	// inside it, not reading the channel), then passed on to the loop.
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range ch {
			r.changes.Add(1)
			r.changeMu.Lock()
			f := r.onChange
			r.changeMu.Unlock()
			if f != nil {
				f()
			}
			select {
			case out <- struct{}{}:
			default: // one pending notification is enough
			}
		}
	}()
	return out
}

// MaxBackoffTicks bounds the wait after failed actions (see Run).
const MaxBackoffTicks = replica.MaxBackoffTicks

// SnapshotNow asks the primary for a snapshot at its next decision. It is
// safe to call from any goroutine: the machine is only ever stepped by
// Run's.
func (r *Replicator) SnapshotNow() { r.snapshotNow.Store(true); r.poke() }

// Release asks the active primary to end its term (unpublish): a final
// snapshot, then a demotion carrying it in one compare-and-swap. Status
// reports Released once done. Safe from any goroutine. It also ends an
// acquisition under way.
func (r *Replicator) Release() {
	r.mu.Lock()
	r.requests = append(r.requests, replica.Release{})
	r.status.Released = false // the new request's answer, not an old one
	r.mu.Unlock()
	r.poke()
}

func (r *Replicator) poke() {
	select {
	case r.wake <- struct{}{}:
	default: // one pending wake is enough
	}
}

// Acquire asks this replica to become the volume's single active primary
// (a read/write publish: replica.Acquire) and waits until it is. When ctx
// ends first, the last waiting caller abandons the acquisition: stepped
// before the machine's next decision, so no promotion follows an error;
// a promotion already under way is waited for (bounded) and answers by its
// outcome. The error (wrapping ErrPending) says what it waited for:
// another replica active, or its catching up. Safe from any goroutine; Run
// must be running.
func (r *Replicator) Acquire(ctx context.Context) error {
	r.mu.Lock()
	r.requests = append(r.requests, replica.Acquire{})
	r.acquirers++
	// The request resets Acquired; a status read before Run steps it
	// must not be taken for the answer.
	r.status.Acquired, r.status.Acquiring = false, true
	since := r.promotions
	r.mu.Unlock()
	r.poke()
	for {
		r.mu.Lock()
		st, changed := r.status, r.statusChanged
		if st.Acquired {
			r.acquirers--
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return r.giveUp(since)
		}
	}
}

// giveUp ends an Acquire whose caller stopped waiting; since is the count
// of promotions when it began.
func (r *Replicator) giveUp(since uint64) error {
	r.mu.Lock()
	r.acquirers--
	if r.status.Acquired {
		r.mu.Unlock()
		return nil
	}
	if r.acquirers == 0 {
		r.requests = append(r.requests, replica.Abandon{})
	}
	waiting := r.status.Waiting
	deadline := time.NewTimer(MaxPromoteWait)
	defer deadline.Stop()
	for r.promoting {
		// The compare-and-swap is on its way: its outcome is the answer.
		changed := r.statusChanged
		r.mu.Unlock()
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("replica of volume %s on %s: its promotion did not finish in %s: %w", r.cfg.Volume, r.cfg.Node, MaxPromoteWait, refusal.ErrPending)
		}
		r.mu.Lock()
	}
	promoted := r.promotions > since // a promotion that landed after this acquisition began
	r.mu.Unlock()
	r.poke()
	if promoted {
		return nil
	}
	if waiting == "" {
		waiting = "its own catching up"
	}
	return fmt.Errorf("replica of volume %s on %s is not the primary yet, waiting for %s: %w", r.cfg.Volume, r.cfg.Node, waiting, refusal.ErrPending)
}

// MaxPromoteWait bounds how long an Acquire given up waits for a
// promotion already on its way to the shared state.
const MaxPromoteWait = 30 * time.Second

// ReleaseAndWait asks for a Release and waits until it finished: the final
// snapshot recorded and this replica not active (at once when it was not
// the primary). The error wraps ErrPending when ctx ended first.
func (r *Replicator) ReleaseAndWait(ctx context.Context) error {
	r.Release()
	for {
		r.mu.Lock()
		st, changed := r.status, r.statusChanged
		r.mu.Unlock()
		if st.Released {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			why := st.LastError
			if why == "" {
				why = "no error yet"
			}
			return fmt.Errorf("release of volume %s on %s not finished (%s): %w", r.cfg.Volume, r.cfg.Node, why, refusal.ErrPending)
		}
	}
}

// settle observes and acts until the machine has nothing more to do now;
// it reports whether an action failed, and whether it stopped before the
// machine had nothing to do (a read failed, or the round's bound): then
// the next tick settles again. full lists the local store even when the
// machine's view of it is current.
func (r *Replicator) settle(ctx context.Context, full bool) (failed, incomplete bool) {
	// One read of the shared state that waits out its bound per round: on
	// a stale view the round's next steps decide on it without waiting
	// again (each read of a stopped API server costs its whole bound).
	r.roundStale = false
	for i := 0; i < 64 && ctx.Err() == nil; i++ {
		err := r.observe(ctx, full && i == 0)
		stale := errors.Is(err, errStaleView)
		if err != nil && !stale && !(r.terminating && errors.Is(err, ports.ErrNotFound)) {
			if r.m.Left() && errors.Is(err, ports.ErrNotFound) {
				return failed, false // left, and the volume is gone: nothing to wait for
			}
			r.log.Info("waiting for the volume's state", zap.Error(err))
			return failed, true
		}
		a, ok := r.decide()
		if !ok {
			return failed, stale // on a stale view, read again next tick
		}
		if r.m.OnStaleView() {
			err = r.execStale(ctx, a)
		} else {
			err = r.execWatched(ctx, a)
		}
		if errors.Is(err, replica.ErrUnchanged) || errors.Is(err, replica.ErrViewReturned) || errors.Is(err, replica.ErrTermEnded) {
			// Skipped (nothing written), or stopped because the state
			// reads again or the action's term ended: not failed,
			// decided again at once.
			if errors.Is(err, replica.ErrTermEnded) {
				r.log.Info("peer action stopped: its term ended", zap.String("action", fmt.Sprintf("%T", a)), zap.Error(err))
			}
			_ = r.m.Step(replica.ActionDone{Action: a, Err: err})
			continue
		}
		r.mu.Lock()
		switch {
		case err != nil:
			r.status.LastError = err.Error()
		case progressMade(a):
			r.status.LastError = ""
		}
		r.mu.Unlock()
		if err != nil {
			failed = true
			r.log.Warn("action failed; retrying on a later tick", zap.String("action", fmt.Sprintf("%T", a)), zap.Error(err))
		}
		_ = r.m.Step(replica.ActionDone{Action: a, Err: err})
		if _, ok := a.(replica.BecomePrimary); ok {
			r.mu.Lock()
			r.promoting = false
			if err == nil {
				r.promotions++
			}
			close(r.statusChanged)
			r.statusChanged = make(chan struct{})
			r.mu.Unlock()
		}
		r.publishStatus()
	}
	return failed, true
}

// decide steps the publish requests pending and asks the machine for its
// next action, in one critical section: an Abandon queued before it is
// stepped first, and a BecomePrimary decided is visible (promoting) to an
// Acquire giving up after it.
func (r *Replicator) decide() (replica.Action, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range r.requests {
		_ = r.m.Step(ev)
	}
	r.requests = nil
	a, ok := r.m.Next()
	if _, promote := a.(replica.BecomePrimary); ok && promote {
		r.promoting = true
	}
	return a, ok
}

// progressMade: actions whose success clears the last error (a report or a
// listing succeeding says nothing about why the replica was behind).
func progressMade(a replica.Action) bool {
	switch a.(type) {
	case replica.Fetch, replica.TakeSnapshot, replica.Rollback, replica.Replace:
		return true
	}
	return false
}

// observe feeds the machine the shared state (always read afresh) and the
// local snapshots, listed only when the machine's view of them is stale
// (replica.Machine.NeedsLocal: only its own actions change them) or full
// is set.
func (r *Replicator) observe(ctx context.Context, full bool) error {
	var st replica.State
	err := errRoundStale
	if !r.roundStale {
		r.observedChanges = r.changes.Load()
		st, err = r.read(ctx)
	}
	switch {
	case err == nil:
		// The state first: a state that contradicts the machine's view
		// of the pool makes it stale (NeedsLocal), and the pool is
		// listed now.
		_ = r.m.Step(replica.Observed{State: st})
		if r.stale {
			r.log.Info("the volume's state reads again: reporting what the replica holds first")
		}
		r.stale = false
	case errors.Is(err, ports.ErrNotFound) || ctx.Err() != nil:
		return err
	default:
		// The state cannot be read (the API server is away, or this node
		// is cut off from it): the machine decides on its last view by
		// the stale view's rules, which need the pool listed as usual.
		if !r.stale {
			r.log.Warn("cannot read the volume's state: acting on the last view (snapshots and incremental fetches from the primary only) until it reads again", zap.Error(err))
		}
		r.stale, r.roundStale = true, true
		_ = r.m.Step(replica.StateUnreadable{})
	}
	if full || r.m.NeedsLocal() {
		read, err := r.local(ctx)
		if err != nil {
			return err
		}
		if r.terminating && len(read.Snaps) > 0 {
			// Only a leave asks whether the copy changed since its newest
			// snapshot (a fenced term's writes are kept aside first): a
			// pool that cannot tell, or a failed read, says it may have.
			u, err := r.store.Unchanged(ctx, r.cfg.Volume)
			read.Unchanged = err == nil && u
		}
		_ = r.m.Step(read)
	}
	r.mu.Lock()
	r.status.StaleView = r.stale
	if !r.stale {
		self, _ := st.Replica(r.cfg.Node)
		r.status.Snapshot, r.status.Epoch, r.status.Ready = self.Snapshot, self.SnapshotEpoch, self.Ready
		r.status.Primary = st.Primary == r.cfg.Node && self.Active
		r.status.Volume = replica.Summarize(st, st.Deleting)
		r.status.ReplicationFactor = st.ReplicationFactor
		r.status.Behind, r.status.HoldsNewest = replica.LagOf(st, r.cfg.Node)
		r.observed = true
	}
	r.mu.Unlock()
	r.publishStatus()
	if r.stale {
		return fmt.Errorf("%w: %w", errStaleView, err)
	}
	return nil
}

// errStaleView: observe could not read the shared state; the machine was
// told (replica.StateUnreadable) and may still act on its last view.
var errStaleView = errors.New("deciding on the last view of the volume's state")

// read reads the volume's shared state, bounded by stateReadTimeout: a
// server that stopped answering (not refusing) must not hold the decision
// loop, since a primary on a stale view still snapshots and a replica
// must report soon after the state reads again (5.8).
func (r *Replicator) read(ctx context.Context) (replica.State, error) {
	return r.readWithin(ctx, r.readBound())
}

// readBound is how long a read of the shared state may wait: on a stale
// view a read only asks whether the state is back, and must not hold the
// snapshots and fetches of an outage (a healthy API server answers in
// milliseconds). Read by the loop's goroutine only.
func (r *Replicator) readBound() time.Duration {
	if r.stale {
		return staleReadTimeout(r.cfg.Tick)
	}
	return stateReadTimeout(r.cfg.Tick)
}

func (r *Replicator) readWithin(ctx context.Context, bound time.Duration) (replica.State, error) {
	rctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return r.cluster.Get(rctx, r.cfg.Volume)
}

// updateState changes the shared state by compare-and-swap within a bound
// (stateWriteTimeout): a write that hangs (an API server stopped, a node
// cut off from it) must not hold the volume manager, which goes on by the
// stale view's rules meanwhile. A write cut short may have landed: the
// machine reads the state again before it decides anything more.
func (r *Replicator) updateState(ctx context.Context, fn func(*replica.State) error) (replica.State, error) {
	wctx, cancel := context.WithTimeout(ctx, stateWriteTimeout(r.cfg.Tick))
	defer cancel()
	return r.cluster.Update(wctx, r.cfg.Volume, fn)
}

// staleReadTimeout bounds a read on a stale view: a tick, at least 1 s.
func staleReadTimeout(tick time.Duration) time.Duration {
	return max(tick, time.Second)
}

// stateWriteTimeout bounds one compare-and-swap (a read and a write,
// again on a conflict): twice a read's bound.
func stateWriteTimeout(tick time.Duration) time.Duration {
	return 2 * stateReadTimeout(tick)
}

// readable reports whether the shared state reads again (or is known to
// be gone): the end of a stale view.
func (r *Replicator) readable(ctx context.Context) bool {
	return r.readableWithin(ctx, r.readBound())
}

func (r *Replicator) readableWithin(ctx context.Context, bound time.Duration) bool {
	_, err := r.readWithin(ctx, bound)
	return err == nil || errors.Is(err, ports.ErrNotFound)
}

// errRoundStale stands for a read not made again in a round that found
// the state unreadable.
var errRoundStale = errors.New("the volume's state could not be read earlier in this round")

// stateReadTimeout bounds one read of the shared state: two ticks, at
// least 10 s. It only tells a server that stopped answering from a slow
// one (a loaded control plane or node can take seconds): a read cut
// short makes the round decide on the last view, which records nothing.
func stateReadTimeout(tick time.Duration) time.Duration {
	return max(2*tick, 10*time.Second)
}

// execStale carries out an action decided on a stale view. A peer action
// (a listing, a transfer) runs only while the state stays unreadable: it
// is polled every tick, and once it reads again the action is cancelled
// and answers replica.ErrViewReturned, so that the replica reports what it
// holds before a takeover decided after the outage (5.8) could miss it.
// The rest (a snapshot, retention) is local and quick.
func (r *Replicator) execStale(ctx context.Context, a replica.Action) error {
	switch a.(type) {
	case replica.ReadPeer, replica.Fetch:
	default:
		return r.exec(ctx, a)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	bound := r.readBound() // the loop's: not read from the poller
	go func() {
		t := time.NewTicker(r.cfg.Tick)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if r.readableWithin(sctx, bound) {
					cancel(replica.ErrViewReturned)
					return
				}
			}
		}
	}()
	err := r.exec(sctx, a)
	if err != nil && errors.Is(context.Cause(sctx), replica.ErrViewReturned) {
		return fmt.Errorf("%w: %T stopped: %v", replica.ErrViewReturned, a, err)
	}
	return err
}

// execWatched carries out an action decided on a current view. A peer
// action (a listing, a transfer) stops talking to its peer when a change
// the watch tells of shows that a takeover ended the peer's term
// (replica.TermEnded): it answers replica.ErrTermEnded, and the machine
// plans again from the new term at once. Only the calls to the peer are
// cancelled (peerCtx): a receive fails as on a broken stream, and the
// local steps (a replacement's commit) run to their end. A change told
// between the view's read and the action's start is checked at once.
// Without a watch (polling) the action runs until it ends, as the
// transport's liveness checks bound it.
func (r *Replicator) execWatched(ctx context.Context, a replica.Action) error {
	peer, ok := replica.PeerOf(a)
	if !ok {
		return r.exec(ctx, a)
	}
	epoch := r.m.Term()
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	bound := stateReadTimeout(r.cfg.Tick)
	check := func() {
		if tctx.Err() != nil {
			return
		}
		st, err := r.readWithin(tctx, bound)
		if err == nil && replica.TermEnded(peer, epoch, st) {
			cancel(fmt.Errorf("%w: a takeover began epoch %d with primary %q", replica.ErrTermEnded, st.Epoch, st.Primary))
		}
	}
	r.changeMu.Lock()
	r.onChange = check
	r.changeMu.Unlock()
	r.transportCtx = tctx
	defer func() {
		r.transportCtx = nil
		r.changeMu.Lock()
		r.onChange = nil
		r.changeMu.Unlock()
	}()
	if r.changes.Load() != r.observedChanges {
		go check() // a change since the view was read
	}
	err := r.exec(ctx, a)
	if cause := context.Cause(tctx); err != nil && errors.Is(cause, replica.ErrTermEnded) {
		return fmt.Errorf("%w: %T from %s of epoch %d stopped: %w", cause, a, peer, epoch, err)
	}
	return err
}

// peerCtx is the context of a call to a peer: the running peer action's
// (execWatched), else ctx. Only Run's goroutine calls it.
func (r *Replicator) peerCtx(ctx context.Context) context.Context {
	if r.transportCtx != nil {
		return r.transportCtx
	}
	return ctx
}

// publishStatus copies the machine's publish state into the status and
// tells the waiters. Only Run's goroutine calls it (it reads the machine).
func (r *Replicator) publishStatus() {
	on, why := r.m.Acquiring()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requests) > 0 {
		return // a request not yet stepped: the machine's answer is older
	}
	r.status.Released, r.status.Acquired, r.status.Acquiring, r.status.Waiting = r.m.Released(), r.m.Acquired(), on, why
	close(r.statusChanged)
	r.statusChanged = make(chan struct{})
}

// local reads the replication snapshots the store holds and whether it
// holds the volume's dataset at all.
func (r *Replicator) local(ctx context.Context) (replica.LocalRead, error) {
	list, err := r.store.ListSnapshots(ctx, r.cfg.Volume)
	if errors.Is(err, ports.ErrNotFound) {
		return replica.LocalRead{}, nil // no local data yet
	}
	if err != nil {
		return replica.LocalRead{}, err
	}
	read := replica.LocalRead{Snaps: toSnaps(list), HasData: true}
	taken := make(map[uint64]int64, len(list))
	for _, s := range list {
		if s.GUID != 0 && !s.CreatedAt.IsZero() {
			taken[s.GUID] = s.CreatedAt.Unix()
		}
	}
	r.mu.Lock()
	r.status.NewestTaken = newestTaken(list)
	r.takenAt = taken
	r.mu.Unlock()
	if r.m.NeedsCapacity() {
		info, err := r.store.GetVolume(ctx, r.cfg.Volume)
		if errors.Is(err, ports.ErrNotFound) {
			return replica.LocalRead{}, nil // gone in between
		}
		if err != nil {
			return replica.LocalRead{}, err
		}
		read.CapacityBytes, read.CapacityRead, read.Properties = info.CapacityBytes, true, info.Properties
	}
	return read, nil
}

// takenOf is when the local snapshot guid was taken (Unix seconds; 0:
// not known).
func (r *Replicator) takenOf(guid uint64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takenAt[guid]
}

// newestTaken is when the newest replication snapshot of a listing
// (oldest first) was taken; zero for none.
func newestTaken(list []ports.SnapshotInfo) time.Time {
	for i := len(list) - 1; i >= 0; i-- {
		if _, _, ok := replica.ParseSnapshotName(list[i].Name); ok {
			return list[i].CreatedAt
		}
	}
	return time.Time{}
}

// toSnaps keeps the replication snapshots of a listing; each carries its
// number and epoch in its name.
func toSnaps(list []ports.SnapshotInfo) []replica.Snap {
	var out []replica.Snap
	for _, s := range list {
		n, e, ok := replica.ParseSnapshotName(s.Name)
		if !ok {
			continue
		}
		out = append(out, replica.Snap{Number: n, GUID: s.GUID, Epoch: e})
	}
	return out
}
