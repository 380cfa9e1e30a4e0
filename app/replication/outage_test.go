package replication_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// outageState is a shared state that can be taken away, as an API server
// that is away (a control-plane upgrade) or a node cut off from it: while
// down, every read and write fails. Watch is not offered: the volume
// managers read every tick.
type outageState struct {
	ports.ClusterState
	down atomic.Bool
	// writesWhileDown counts the compare-and-swaps tried while down.
	writesWhileDown atomic.Int64
}

func (o *outageState) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if o.down.Load() {
		return replica.State{}, fmt.Errorf("read cluster state of volume %s: dial tcp 10.0.0.1:6443: connect: connection refused: %w", id, ports.ErrUnavailable)
	}
	return o.ClusterState.Get(ctx, id)
}

func (o *outageState) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	if o.down.Load() {
		o.writesWhileDown.Add(1)
		return replica.State{}, fmt.Errorf("update cluster state of volume %s: connection refused: %w", id, ports.ErrUnavailable)
	}
	return o.ClusterState.Update(ctx, id, fn)
}

func TestDuringAnAPIServerOutageThePrimaryKeepsSnapshottingAndTheSecondariesKeepFetching(t *testing.T) {
	c := newCluster(t, 2, "a", "b", "c")
	o := &outageState{ClusterState: c.state}
	c.stateOverride = o
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b", "c"} {
		c.start(n)
	}
	c.eventually("b and c hold v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		cc, _ := st.Replica("c")
		return c.holds("b", "v1") && c.holds("c", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b") && cc.Snapshot == c.newestStored("c")
	})

	o.down.Store(true)
	before, _ := c.state.Get(ctx, volID)
	start := c.newestStoredSnap("a")
	// The pod on a writes on through the outage (its guard lets it: its
	// peers promise); every write reaches both secondaries within a few
	// snapshot intervals, as if the state were there.
	for i := 2; i <= 6; i++ {
		v := fmt.Sprintf("v%d", i)
		c.write("a", v)
		c.eventually("b and c hold "+v+" during the outage", func() bool { return c.holds("b", v) && c.holds("c", v) })
	}
	newest := c.newestStoredSnap("a")
	if !newest.Newer(start) || newest.Epoch != before.Epoch {
		t.Fatalf("a's newest snapshot went from %v to %v during the outage, epoch %d", start, newest, before.Epoch)
	}
	if st, _ := c.state.Get(ctx, volID); st.Version != before.Version {
		t.Fatalf("the state changed during the outage: %+v", st)
	}
	if n := o.writesWhileDown.Load(); n != 0 {
		t.Fatalf("%d compare-and-swaps were tried while the state could not be read", n)
	}
	if s := c.reps["b"].Status(); !s.StaleView || s.Snapshot >= newest.Number {
		t.Fatalf("b's status during the outage: %+v (want the last view's snapshot, marked stale)", s)
	}

	// The state is back: every replica reports what it holds, and the
	// list catches up with the stores: each entry reaches, ready, at
	// least what its copy held when the outage ended (the primary
	// snapshots on meanwhile: the list follows a moving store, so
	// progress is awaited, not an instant when all three agree).
	held := map[replica.Node]replica.Snap{}
	for _, n := range []replica.Node{"a", "b", "c"} {
		held[n] = c.newestStoredSnap(n)
	}
	o.down.Store(false)
	c.eventually("the state caught up with the stores", func() bool {
		st, _ := c.state.Get(ctx, volID)
		for _, n := range []replica.Node{"a", "b", "c"} {
			r, _ := st.Replica(n)
			if held[n].Newer(r.Holds()) || !r.Ready || r.Holds().Epoch != before.Epoch {
				return false
			}
		}
		return true
	})
	if s := c.reps["b"].Status(); s.StaleView {
		t.Fatalf("b's status after the outage: %+v", s)
	}
	for _, r := range c.events.reasons() {
		if r == "RolledBack" || r == "Replaced" || r == "FencedWritesKept" {
			t.Fatalf("an outage discarded or kept aside something: events %v", c.events.reasons())
		}
	}
}

func TestAfterAnOutageASecondaryReportsAtOnceWhateverItsBackOff(t *testing.T) {
	// The primary's node is lost during the outage, after b fetched its
	// last snapshot: b's listings of a fail, and its back-off grows to
	// MaxBackoffTicks. When the state is back a takeover comes after a
	// lease period (5.8); b must have reported what it fetched by then,
	// not a back-off later.
	core, logs := observer.New(zap.InfoLevel)
	c := newCluster(t, 2, "a", "b")
	c.log = zap.New(core)
	o := &outageState{ClusterState: c.state}
	c.stateOverride = o
	c.write("a", "v1")
	tick := 50 * time.Millisecond
	for _, n := range []replica.Node{"a", "b"} {
		c.startWith(n, func(cfg *replication.Config) { cfg.Tick, cfg.SnapshotInterval = tick, 2*tick })
	}
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b")
	})
	o.down.Store(true)
	c.write("a", "v2")
	c.eventually("b holds v2, fetched during the outage", func() bool { return c.holds("b", "v2") })
	fetched := c.newestStoredSnap("b")
	c.stop("a")
	c.net.Cut("a")
	failures := func() int {
		return logs.FilterField(zap.String("node", "b")).FilterMessage("action failed; retrying on a later tick").Len()
	}
	if !within(30*time.Second, func() bool { return failures() >= 6 }) {
		t.Fatalf("b failed only %d times to reach a", failures())
	}
	// b just failed for the sixth time in a row: its next settle is
	// MaxBackoffTicks - 1 ticks away (3.15 s).
	o.down.Store(false)
	back := time.Now()
	reported := func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return b.Holds() == fetched
	}
	if !within(time.Duration(replication.MaxBackoffTicks)*tick/2, reported) {
		t.Fatalf("b did not report %v within %s of the state's return", fetched, time.Duration(replication.MaxBackoffTicks)*tick/2)
	}
	t.Logf("b reported %v %s after the state returned", fetched, time.Since(back).Round(time.Millisecond))
	// A takeover now gives up nothing b fetched during the outage.
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { return ackThenTakeover(s, "b", "a", 1) }); err != nil {
		t.Fatal(err)
	}
	st, _ := c.state.Get(ctx, volID)
	if b, _ := st.Replica("b"); !b.Active || b.Holds() != fetched {
		t.Fatalf("after the takeover: %+v", st)
	}
}

// hangingState is an API server that stops answering (a SIGSTOP, a
// partition that drops packets): from the first write after hang is
// armed, every read and write waits until its context ends.
type hangingState struct {
	ports.ClusterState
	armed, hung atomic.Bool
}

func (h *hangingState) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if h.hung.Load() {
		<-ctx.Done()
		return replica.State{}, fmt.Errorf("read cluster state of volume %s: %w", id, ctx.Err())
	}
	return h.ClusterState.Get(ctx, id)
}

func (h *hangingState) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	if h.armed.Load() {
		h.hung.Store(true)
	}
	if h.hung.Load() {
		<-ctx.Done()
		return replica.State{}, fmt.Errorf("update cluster state of volume %s: %w", id, ctx.Err())
	}
	return h.ClusterState.Update(ctx, id, fn)
}

// Issue 21.8: the API server stops answering in the middle of a
// compare-and-swap. The write is bounded (it must not hold the volume
// manager for the whole outage): the primary goes on snapshotting by the
// stale view's rules, and the secondaries on fetching.
func TestAWriteHangingWhenTheAPIServerStopsDoesNotStopTheShipping(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	h := &hangingState{ClusterState: c.state}
	c.stateOverride = h
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b"} {
		c.start(n)
	}
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b")
	})
	h.armed.Store(true) // the next write (a's report of v2's snapshot, b's of its fetch) hangs
	for i := 2; i <= 4; i++ {
		v := fmt.Sprintf("v%d", i)
		c.write("a", v)
		// Each read now waits out its bound (2 s) before the stale view's
		// rules apply: slower than an outage that refuses at once.
		if !within(40*time.Second, func() bool { return c.holds("b", v) }) {
			t.Fatalf("b does not hold %s while the API server hangs", v)
		}
	}
	if !h.hung.Load() {
		t.Fatal("no write was tried after v1: the test did not hang the API server mid-write")
	}
}

// watchingOutage is outageState offering the watch of the shared state
// (as the Kubernetes store does): while the state is away the watch is
// silent, and does not say why.
type watchingOutage struct {
	*outageState
	watch ports.StateWatcher
}

func (w *watchingOutage) Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error) {
	return w.watch.Watch(ctx, id)
}

// Issue 21.8: volume managers that watch the state while idle hear
// nothing from an API server that stopped; they must not wait for a
// notification (or the resync, minutes later) to keep fetching: a watch
// silent for a few snapshot intervals has them read, which fails, and
// the stale view's rules apply.
func TestAWatchSilentThroughAnOutageDoesNotStopTheFetching(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	o := &watchingOutage{outageState: &outageState{ClusterState: c.state}, watch: c.state}
	c.stateOverride = o
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b"} {
		c.startWith(n, func(cfg *replication.Config) { cfg.Resync = time.Hour })
	}
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b")
	})
	o.down.Store(true)
	for i := 2; i <= 4; i++ {
		v := fmt.Sprintf("v%d", i)
		c.write("a", v)
		c.eventually("b holds "+v+" during the outage, its watch silent", func() bool { return c.holds("b", v) })
	}
}

// The same with the volume's own snapshot interval (its spec's, in the
// state) far shorter than the volume managers' --snapshot-interval: the
// primary snapshots at the volume's, and a watch silent for three of the
// volume's intervals, not the flag's hour, has the secondary read.
func TestAWatchSilentForThreeOfTheVolumesIntervalsHasTheStateRead(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { s.SnapshotInterval = 20 * time.Millisecond; return nil }); err != nil {
		t.Fatal(err)
	}
	o := &watchingOutage{outageState: &outageState{ClusterState: c.state}, watch: c.state}
	c.stateOverride = o
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b"} {
		c.startWith(n, func(cfg *replication.Config) { cfg.Resync, cfg.SnapshotInterval = time.Hour, time.Hour })
	}
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b")
	})
	o.down.Store(true)
	c.write("a", "v2")
	c.eventually("b holds v2 during the outage, its watch silent", func() bool { return c.holds("b", "v2") })
}
