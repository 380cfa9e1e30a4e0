package replica

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The simulation runs replica machines against simulated stores, a shared
// state changed only by compare-and-swap, and a hostile world: transfers
// that last many ticks, crashes between any two steps of an action, lost
// compare-and-swaps, stale reads of the shared state, partitions,
// handovers, takeovers, leaves, late joiners and arbitrary epochs. After
// every step it checks the invariants against what the stores hold, not
// against the list; at the end it heals the world and checks that every
// replica converges. `go test` runs a short fixed set of seeds (300 of
// 600 steps); `make sim` runs long ones (10000 of 1500 steps, SEEDS=,
// STEPS=, FIRST=), as does
//
//	go test ./domain/replica -run '^TestSimulation$' -sim.seeds=10000 -sim.steps=1500
//
// A seed found failing is kept as a test of its own
// (sim_seeds_test.go).
var (
	simSeeds = flag.Int("sim.seeds", 300, "number of seeds the simulation runs")
	simFirst = flag.Int64("sim.first", 1, "first seed")
	simSteps = flag.Int("sim.steps", 600, "steps per seed")
)

// TestSimulation runs the seeds on every CPU (each world is its own) and
// reports the lowest seed that fails, as a run in order would.
func TestSimulation(t *testing.T) {
	first, end := *simFirst, *simFirst+int64(*simSeeds)
	var (
		next   atomic.Int64
		mu     sync.Mutex
		failed = end // the lowest failing seed so far
		report string
		wg     sync.WaitGroup
	)
	next.Store(first)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1 // seeds are handed out in order
				mu.Lock()
				stop := seed >= failed
				mu.Unlock()
				if stop {
					return
				}
				w := newWorld(seed)
				if err := w.run(*simSteps); err != nil {
					mu.Lock()
					if seed < failed {
						failed, report = seed, fmt.Sprintf("%v\nlast steps:\n%s", err, w.trace())
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if failed < end {
		t.Fatalf("seed %d: %s", failed, report)
	}
}

type simNode struct {
	name     Node
	m        *Machine // nil while down
	store    []Snap   // survives crashes
	hasData  bool
	dirty    bool // written since the newest snapshot
	cut      bool // partitioned from its peers
	inFlight Action
	ticks    int      // ticks left until the transfer in flight ends
	healed   bool     // the transfer in flight started after the world healed
	gone     bool     // left the volume
	mounted  bool     // the pod writes here (the active primary of the sim's view)
	release  bool     // unpublish asked; re-asked after a restart (the kubelet retries)
	acquire  bool     // publish asked, not yet answered; re-asked after a restart
	fenced   bool     // a takeover ended its term while it may have held unsnapshotted writes
	term     bool     // terminate asked (a restart is a new volume manager that stays)
	kept     []string // copies kept aside before a leave
	// seen is the world's write count at the view this node last read
	// (older than the newest after a lagging read): an idle machine
	// (Wake < 0) is woken only by a change it has not seen, as a watch
	// wakes it.
	seen int
}

type world struct {
	r       *rand.Rand
	state   State
	history []State
	nodes   []*simNode
	guid    uint64
	lines   []string
	joiners int
	quiet   bool // no faults: the world has healed
	// violation: an invariant an action broke while carried out
	// (reported by the next check).
	violation error
	writes    int // writes to the shared state so far
}

// errCrash: the node crashed in the middle of an action.
var errCrash = errors.New("crashed")

func newWorld(seed int64) *world {
	r := rand.New(rand.NewSource(seed))
	w := &world{r: r, guid: 1000}
	epoch := Epoch(1 + r.Intn(5))
	w.state = State{Volume: "v", ReplicationFactor: 1 + r.Intn(3), Epoch: epoch}
	// One lineage of snapshots with epochs up to the volume's: every node
	// holds a subsequence of it, so the world starts consistent.
	var lineage []Snap
	e := Epoch(1)
	for n := SnapshotNumber(1); n <= SnapshotNumber(2+r.Intn(6)); n++ {
		if e < epoch && r.Intn(3) == 0 {
			e += Epoch(1 + r.Intn(int(epoch-e)))
		}
		w.guid++
		lineage = append(lineage, Snap{Number: n, Epoch: e, GUID: w.guid})
	}
	for i := 0; i < 2+r.Intn(3); i++ {
		n := &simNode{name: Node(string(rune('a' + i)))}
		upTo := r.Intn(len(lineage) + 1)
		if i == 0 {
			upTo = len(lineage) // someone holds the newest
		}
		for _, s := range lineage[:upTo] {
			if r.Intn(3) > 0 || s == lineage[upTo-1] {
				n.store = append(n.store, s)
			}
		}
		n.hasData = len(n.store) > 0
		n.m = w.newMachine(n.name)
		w.nodes = append(w.nodes, n)
	}
	return w
}

func (w *world) newMachine(n Node) *Machine {
	return NewMachine(MachineConfig{Self: n, AllowedLag: uint64(w.r.Intn(2)), Keep: 1 + w.r.Intn(2), SnapshotEvery: 1 + w.r.Intn(3)})
}

func (w *world) logf(format string, args ...any) {
	w.lines = append(w.lines, fmt.Sprintf(format, args...))
	if len(w.lines) > 4000 {
		w.lines = w.lines[1:]
	}
}

func (w *world) trace() string {
	return strings.Join(w.lines, "\n") + "\n" + w.describe()
}

func (w *world) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state: epoch=%d primary=%q rf=%d\n", w.state.Epoch, w.state.Primary, w.state.ReplicationFactor)
	for _, r := range w.state.Replicas {
		fmt.Fprintf(&b, "  %s: %v active=%v ready=%v fetching=%v forked=%+v\n", r.Node, r.Holds(), r.Active, r.Ready, r.Fetching, r.Forked)
	}
	for _, n := range w.nodes {
		fmt.Fprintf(&b, "  store %s: %v up=%v cut=%v gone=%v mounted=%v dirty=%v kept=%v\n", n.name, n.store, n.m != nil, n.cut, n.gone, n.mounted, n.dirty, n.kept)
	}
	return b.String()
}

func (w *world) node(n Node) *simNode {
	for _, x := range w.nodes {
		if x.name == n {
			return x
		}
	}
	return nil
}

// cas is ClusterState.Update: fn runs on the newest state and its result is
// kept only if valid. A lost write (the apiserver did not answer) is an
// error the caller sees.
func (w *world) cas(fn func(*State) error) error {
	if !w.quiet && w.r.Intn(25) == 0 {
		return errors.New("the shared state did not answer")
	}
	next := cloneState(w.state)
	if err := fn(&next); err != nil {
		return err
	}
	if err := next.Validate(); err != nil {
		return fmt.Errorf("invalid state written: %w", err)
	}
	w.history = append(w.history, w.state)
	if len(w.history) > 6 {
		w.history = w.history[1:]
	}
	w.state = next
	w.writes++
	return nil
}

// crash: maybe the node dies here, between two steps of an action.
func (w *world) crash(n *simNode) bool {
	if !w.quiet && w.r.Intn(30) == 0 {
		w.logf("%s crashes", n.name)
		n.m, n.inFlight = nil, nil
		return true
	}
	return false
}

func (w *world) run(steps int) error {
	for i := 0; i < steps; i++ {
		before := w.newest()
		count := w.copies(before)
		if err := w.randomStep(); err != nil {
			return err
		}
		if err := w.check(before, count); err != nil {
			return err
		}
	}
	return w.converge()
}

func (w *world) live() []*simNode {
	var out []*simNode
	for _, n := range w.nodes {
		if !n.gone {
			out = append(out, n)
		}
	}
	return out
}

func (w *world) randomStep() error {
	live := w.live()
	if len(live) == 0 {
		return errors.New("every replica left")
	}
	n := live[w.r.Intn(len(live))]
	switch k := w.r.Intn(100); {
	case k < 40:
		return w.step(n)
	case k < 60:
		if n.m != nil {
			_ = n.m.Step(Tick{})
		}
		if n.inFlight != nil {
			n.ticks--
			if n.ticks <= 0 {
				return w.finish(n)
			}
		}
	case k < 64:
		if n.m != nil {
			w.logf("%s crashes", n.name)
			n.m, n.inFlight = nil, nil
		} else {
			w.restart(n)
		}
	case k < 67:
		n.cut = !n.cut
		w.logf("%s cut=%v", n.name, n.cut)
	case k < 77:
		if n.mounted {
			n.dirty, n.hasData = true, true
			w.logf("%s: the pod writes", n.name)
		}
	case k < 82:
		return w.handover(n)
	case k < 85:
		return w.takeover(n)
	case k < 87:
		if !n.mounted && len(live) > 1 {
			n.term = true
			if n.m != nil {
				w.logf("%s: terminate", n.name)
				_ = n.m.Step(Terminate{})
			}
		}
	case k < 88:
		if w.joiners < 3 {
			w.joiners++
			j := &simNode{name: Node(fmt.Sprintf("j%d", w.joiners))}
			j.m = w.newMachine(j.name)
			w.nodes = append(w.nodes, j)
			w.logf("%s joins", j.name)
		}
	default:
		if n.m == nil && w.r.Intn(2) == 0 {
			w.restart(n)
		}
	}
	return nil
}

func (w *world) restart(n *simNode) {
	n.m = w.newMachine(n.name)
	w.logf("%s restarts", n.name)
	if n.release {
		_ = n.m.Step(Release{})
	}
	if n.acquire {
		_ = n.m.Step(Acquire{})
	}
	// A refused leave kept the copy; the daemon starts a new volume
	// manager for it, which does not terminate.
	n.term = false
}

// handover: a publish on n (which waits while another replica is the
// active primary: a rolling update overlaps two pods), its giving up, or
// the unpublish of the mounted primary.
func (w *world) handover(n *simNode) error {
	if n.acquire && n.m != nil && w.r.Intn(4) == 0 {
		// The publish timed out (Aborted); the kubelet may retry later.
		w.logf("%s: publish gives up", n.name)
		n.acquire = false
		_ = n.m.Step(Abandon{})
		return nil
	}
	if p := w.mountedNode(); p != nil && (p == n || w.r.Intn(2) == 0) {
		if !p.release && p.m != nil {
			w.logf("%s: unpublish", p.name)
			p.mounted, p.release = false, true
			_ = p.m.Step(Release{})
		}
		return nil
	}
	if n.m == nil || n.term || n.release || n.mounted || n.acquire {
		return nil
	}
	w.logf("%s: publish", n.name)
	n.acquire = true
	_ = n.m.Step(Acquire{})
	return nil
}

func (w *world) mountedNode() *simNode {
	for _, x := range w.nodes {
		if x.mounted {
			return x
		}
	}
	return nil
}

// takeover: the active primary is unreachable; n tries to take over. A
// primary that released the volume and is unreachable is taken over as
// released (TakeoverReleased, refused unless it alone holds its final
// snapshot): nothing is mounted, n becomes the inactive primary of a new
// epoch.
func (w *world) takeover(n *simNode) error {
	lost := w.node(w.state.Primary)
	if lost == nil || lost == n || n.m == nil || n.term || n.release {
		return nil
	}
	if lost.m != nil && !lost.cut {
		return nil
	}
	if r, _ := w.state.Replica(lost.name); !r.Active {
		err := w.cas(func(s *State) error { _, err := TakeoverReleased(s, n.name, lost.name, n.m.cfg.AllowedLag); return err })
		w.logf("%s: released takeover from %s -> %v", n.name, lost.name, err)
		return nil
	}
	err := w.cas(func(s *State) error { return Takeover(s, n.name, lost.name, n.m.cfg.AllowedLag) })
	w.logf("%s: takeover from %s -> %v", n.name, lost.name, err)
	if err == nil {
		// Fencing stops the lost primary's writers (the node-loss stage);
		// its pods, re-created, are published here, where the replica is
		// now the active primary. A publish already waiting here keeps
		// waiting, as it does in the volume manager: the takeover is the
		// daemon's compare-and-swap, which the machine only observes, and
		// the waiting Acquire is answered once the machine confirms it on
		// the newest state (Promote changes nothing for the active
		// primary), or given up with Abandon.
		lost.mounted, lost.fenced = false, true
		n.mounted = true
	}
	return nil
}

// step lets n observe (maybe a stale state) and carry out one action.
func (w *world) step(n *simNode) error {
	if n.m == nil || n.inFlight != nil {
		return nil
	}
	if !n.cut && len(Candidates(w.state, n.name)) > 0 {
		// The active primary's guard (the daemon) acknowledges every copy
		// that reported a snapshot as a taker while it reaches the shared
		// state: only those may take over from it.
		err := w.cas(func(s *State) error { return Acknowledge(s, n.name, s.Epoch, Candidates(*s, n.name)) })
		w.logf("%s: acknowledges takers -> %v", n.name, err)
	}
	seen, writes := w.state, w.writes
	if !w.quiet && len(w.history) > 0 && w.r.Intn(6) == 0 {
		// A lagging cache: the writes after the view it returns are still
		// to be notified, as a watch does for every change it has not
		// delivered yet.
		i := w.r.Intn(len(w.history))
		seen, writes = w.history[i], w.writes-(len(w.history)-i)
	}
	_ = n.m.Step(Observed{State: cloneState(seen)})
	n.seen = writes
	// The store is listed only when the machine's view of it is stale:
	// nothing but its own actions changes it (as the volume manager does).
	if n.m.NeedsLocal() {
		// Half the time the pool tells whether anything was written
		// since the newest snapshot (OpenZFS written), never wrongly.
		_ = n.m.Step(LocalRead{Snaps: append([]Snap(nil), n.store...), HasData: n.hasData, Unchanged: !n.dirty && w.r.Intn(2) == 0})
	}
	a, ok := n.m.Next()
	if !ok {
		return nil
	}
	err := w.exec(n, a)
	w.logf("%s: %s -> %v", n.name, describe(a), err)
	switch {
	case errors.Is(err, errInFlight), errors.Is(err, errCrash):
		return nil
	}
	if al, isAlert := a.(Alert); isAlert && !(n.fenced && (strings.Contains(al.Reason, "without any replication snapshot") || strings.Contains(al.Reason, "a takeover ended"))) {
		// The only alert a correct world raises: a primary that never
		// snapshotted was taken over, and its writes wait for an operator.
		return fmt.Errorf("%s raised an alert: %s", n.name, al.Reason)
	}
	if n.m != nil {
		_ = n.m.Step(ActionDone{Action: a, Err: err})
		if n.m.Left() {
			n.gone = true
		}
		if n.release && n.m.Released() {
			n.release = false
		}
		if n.acquire && n.m.Acquired() {
			// Only now does the publish mount the volume read/write.
			w.logf("%s: publish answered: mounted", n.name)
			n.acquire, n.mounted = false, true
		}
	}
	return nil
}

func (w *world) exec(n *simNode, a Action) error {
	switch a := a.(type) {
	case ReportSnapshot:
		return w.cas(func(s *State) error { Join(s, n.name); return Report(s, n.name, a.Snap, a.Ready) })
	case ReadPeer:
		p := w.node(a.Peer)
		if p == nil || p.m == nil || p.cut || n.cut || p.gone {
			return errors.New("peer unreachable")
		}
		return n.m.Step(PeerRead{Peer: a.Peer, Snaps: append([]Snap(nil), p.store...)})
	case Fetch:
		if err := w.cas(func(s *State) error { return RecordFetch(s, n.name, a.Target) }); err != nil {
			return err
		}
		n.inFlight, n.ticks, n.healed = a, w.transferTicks(), w.quiet
		return errInFlight
	case Replace:
		if err := w.cas(func(s *State) error { return RecordFetch(s, n.name, a.Target) }); err != nil {
			return err
		}
		n.inFlight, n.ticks, n.healed = a, w.transferTicks(), w.quiet
		return errInFlight
	case Rollback:
		if err := w.cas(func(s *State) error { return Report(s, n.name, a.To, false) }); err != nil {
			return err
		}
		if w.crash(n) {
			return errCrash
		}
		return w.discard(n, func(s Snap) bool { return s.Newer(a.To) }, fmt.Sprintf("rollback to %v", a.To))
	case TakeSnapshot:
		if a.Periodic && !n.dirty && len(n.store) > 0 && w.r.Intn(2) == 0 {
			return ErrUnchanged // a pool that can tell (OpenZFS written=0)
		}
		for _, s := range n.store {
			if s.Number == a.Number && s.Epoch == a.Epoch {
				return errors.New("snapshot exists")
			}
		}
		w.guid++
		n.store = append(n.store, Snap{Number: a.Number, Epoch: a.Epoch, GUID: w.guid})
		n.dirty, n.hasData = false, true
	case StepDown:
		return w.cas(func(s *State) error { return Demote(s, n.name, a.Epoch, a.Final) })
	case ForgetFetch:
		return w.cas(func(s *State) error { return ClearFetch(s, n.name, a.Target) })
	case BecomePrimary:
		return w.cas(func(s *State) error { return Promote(s, n.name) })
	case DestroySnapshots:
		gone := map[Snap]bool{}
		for _, s := range a.Snaps {
			gone[s] = true
		}
		return w.discard(n, func(s Snap) bool { return gone[s] }, "retention")
	case LeaveVolume:
		holds := a.Holds
		if a.KeepAs != "" {
			// Kept aside first (SnapshotStore.KeepAside, outside the
			// volume's store: it survives the leave).
			n.kept = append(n.kept, a.KeepAs)
			holds.Kept = a.KeepAs
			if w.crash(n) {
				return errCrash
			}
		}
		if err := w.cas(func(s *State) error { _, err := Leave(s, n.name, holds, a.VolumeGone); return err }); err != nil {
			return err
		}
		if n.dirty && holds.Kept == "" && !a.VolumeGone && w.violation == nil {
			// Only a fenced primary's copy is written to and not mounted.
			w.violation = fmt.Errorf("%s left, destroying writes never snapshotted (a fenced term's) without keeping them aside", n.name)
		}
		if w.crash(n) {
			return errCrash
		}
		n.store, n.hasData, n.dirty = nil, false, false
	case Alert:
		return nil
	}
	return nil
}

// discard removes snapshots from n's store; what it removes must not be
// the newest data anywhere (checked after the step, against the stores).
func (w *world) discard(n *simNode, drop func(Snap) bool, why string) error {
	var kept []Snap
	for _, s := range n.store {
		if !drop(s) {
			kept = append(kept, s)
		}
	}
	n.store, n.dirty = kept, false
	return nil
}

// finish ends n's transfer in flight as a store would: the sender must
// still hold what the stream needs and be reachable.
func (w *world) finish(n *simNode) error {
	a, healed := n.inFlight, n.healed
	n.inFlight = nil
	err := w.land(n, a)
	if errors.Is(err, errCrash) {
		return nil
	}
	w.logf("%s: %s finished -> %v", n.name, describe(a), err)
	if healed && err != nil && !errors.Is(err, ErrModified) {
		// Healed, nothing cuts a stream: it broke because the sender
		// destroyed what it needed, which retention must never do while
		// the target is recorded.
		return fmt.Errorf("a transfer broke in a healed world: %v", err)
	}
	if n.m != nil {
		_ = n.m.Step(ActionDone{Action: a, Err: err})
	}
	return nil
}

// transferTicks is how long a transfer lasts; once healed, every transfer
// outlasts the primary's retention window many times over.
func (w *world) transferTicks() int {
	if w.quiet {
		return 15
	}
	return w.r.Intn(12)
}

func (w *world) holds(n *simNode, x Snap) bool {
	for _, s := range n.store {
		if s == x {
			return true
		}
	}
	return false
}

func (w *world) land(n *simNode, a Action) error {
	var peer *simNode
	var target Snap
	var base *Snap
	switch a := a.(type) {
	case Fetch:
		peer, target, base = w.node(a.Peer), a.Target, a.Base
	case Replace:
		peer, target = w.node(a.Peer), a.Target
	}
	if peer == nil || peer.m == nil || peer.cut || n.cut || !w.holds(peer, target) || (base != nil && !w.holds(peer, *base)) {
		return errors.New("the stream broke: the sender is gone or no longer holds its snapshots")
	}
	switch a.(type) {
	case Fetch:
		if base != nil {
			if len(n.store) == 0 || newest(n.store) != *base {
				return errors.New("the incremental source is not the newest snapshot here")
			}
			if n.dirty {
				return fmt.Errorf("receive: %w", ErrModified)
			}
		} else if n.hasData {
			return errors.New("full stream into an existing dataset")
		}
		n.store = append(n.store, target)
		n.hasData = true
	case Replace:
		if err := w.cas(func(s *State) error { return Report(s, n.name, Snap{}, false) }); err != nil {
			return err
		}
		if w.crash(n) {
			return errCrash // the staged copy is lost; the old copy stays
		}
		n.store, n.hasData, n.dirty = []Snap{target}, true, false
	}
	return nil
}

// newest is the newest snapshot any live store holds.
func (w *world) newest() Snap {
	var b Snap
	for _, n := range w.nodes {
		for _, s := range n.store {
			if s.Newer(b) {
				b = s
			}
		}
	}
	return b
}

func (w *world) copies(x Snap) int {
	c := 0
	for _, n := range w.nodes {
		if w.holds(n, x) {
			c++
		}
	}
	return c
}

// check holds the invariants after a step:
//   - the newest snapshot never vanishes from every store, and while it is
//     the newest its copies never fall below min(replicationFactor, copies
//     before the step);
//   - the list never claims a copy a store does not hold;
//   - at most one active primary, only the state's primary, one writer;
//   - a machine acquires only for a publish still waiting;
//   - the stored state is valid.
func (w *world) check(before Snap, count int) error {
	if w.violation != nil {
		return w.violation
	}
	after := w.newest()
	switch {
	case before.Newer(after):
		return fmt.Errorf("the newest snapshot %v vanished from every store", before)
	case after == before && before.Number != 0:
		if c := w.copies(before); c < min(count, w.state.ReplicationFactor) {
			return fmt.Errorf("copies of the newest snapshot %v fell from %d to %d (rf %d)", before, count, c, w.state.ReplicationFactor)
		}
	}
	for _, r := range w.state.Replicas {
		n := w.node(r.Node)
		if r.Snapshot != 0 && (n == nil || !w.holds(n, r.Holds())) {
			return fmt.Errorf("the list says %s holds %v; its store does not", r.Node, r.Holds())
		}
	}
	mounted := 0
	for _, n := range w.nodes {
		if n.m != nil {
			if acquiring, _ := n.m.Acquiring(); acquiring && !n.acquire {
				// A publish answers the kubelet or gives up (Abandon): it
				// is never dropped while the machine works for it.
				return fmt.Errorf("%s acquires for a publish that no longer waits", n.name)
			}
		}
		if n.mounted {
			mounted++
			if r, _ := w.state.Replica(n.name); w.state.Primary != n.name || !r.Active {
				return fmt.Errorf("%s is written to but is not the active primary", n.name)
			}
		}
	}
	if mounted > 1 {
		return fmt.Errorf("%d writers", mounted)
	}
	return w.state.Validate()
}

// converge heals the world and lets every replica settle: all of them end
// holding the newest snapshot, ready, with no transfer recorded.
func (w *world) converge() error {
	w.logf("--- healing")
	w.quiet = true
	for _, n := range w.nodes {
		if n.acquire {
			// Publishes still waiting give up: one writer at most while
			// the world settles, and none at the end.
			n.acquire = false
			if n.m != nil {
				_ = n.m.Step(Abandon{})
			}
		}
	}
	for _, n := range w.nodes {
		n.cut = false
		if (n.m == nil || n.term) && !n.gone {
			w.restart(n)
		}
	}
	if w.mountedNode() == nil && w.stranded() {
		// A released volume was taken over: no line newer than the branch
		// its lost primary keeps exists until the volume is published
		// again (the replica it lands on is promoted).
		if nr, ok := w.state.NewestReplica(); ok {
			if p := w.node(nr.Node); p != nil && p.m != nil && !p.term && !p.gone {
				w.logf("%s: publish", p.name)
				p.acquire = true
				_ = p.m.Step(Acquire{})
			}
		}
	}
	// While the pod writes on, with snapshots every tick or few and
	// transfers fifteen ticks long, no transfer may break.
	for round := 0; round < 60; round++ {
		if err := w.quietRound(); err != nil {
			return err
		}
		if p := w.mountedNode(); p != nil && round%2 == 0 {
			p.dirty, p.hasData = true, true
		}
	}
	// The pod stops (a primary snapshotting every tick would keep the
	// others one behind forever): its final snapshot is what all converge to.
	if p := w.mountedNode(); p != nil {
		p.mounted, p.release = false, true
		_ = p.m.Step(Release{})
	}
	quiet := func() bool {
		b := w.newest()
		for _, n := range w.live() {
			if n.term || (n.fenced && len(n.store) == 0 && n.hasData) {
				continue // kept for an operator
			}
			r, ok := w.state.Replica(n.name)
			if !ok || len(n.store) == 0 || newest(n.store) != b || r.Holds() != b || !r.Ready || r.Fetching.Number != 0 || n.inFlight != nil {
				return false
			}
		}
		for _, r := range w.state.Replicas {
			if r.Active && w.mountedNode() == nil {
				return false // a release still finishing
			}
		}
		return true
	}
	for round := 0; round < 400; round++ {
		if quiet() {
			return nil
		}
		if err := w.quietRound(); err != nil {
			return err
		}
	}
	return fmt.Errorf("did not converge after healing")
}

// stranded: a replica is on the branch a takeover left and no replica
// holds a snapshot of that takeover's epoch or later to resync from.
func (w *world) stranded() bool {
	for _, r := range w.state.Replicas {
		if !r.OnFencedBranch() {
			continue
		}
		line := false
		for _, o := range w.state.Replicas {
			line = line || (o.Snapshot != 0 && o.SnapshotEpoch >= r.Forked.Epoch)
		}
		if !line {
			return true
		}
	}
	return false
}

// quietRound: every live node, in order, ticks, advances its transfer and
// acts until it has nothing more to do.
func (w *world) quietRound() error {
	names := append([]*simNode(nil), w.live()...)
	sort.Slice(names, func(i, j int) bool { return names[i].name < names[j].name })
	for _, n := range names {
		if n.m == nil {
			continue
		}
		_ = n.m.Step(Tick{})
		if n.inFlight != nil {
			if n.ticks--; n.ticks <= 0 {
				if err := w.finish(n); err != nil {
					return err
				}
			}
		}
		if n.m != nil && n.m.Wake() != 0 && n.seen == w.writes {
			continue // idle, and nothing changed: no read, no decision
		}
		for i := 0; i < 10; i++ {
			before := w.newest()
			count := w.copies(before)
			if err := w.step(n); err != nil {
				return err
			}
			if err := w.check(before, count); err != nil {
				return err
			}
		}
	}
	return nil
}
