package replication_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/faketransport"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

var ctx = context.Background()

// events records events for assertions.
type events struct {
	mu  sync.Mutex
	got []ports.Event
}

func (e *events) Record(_ context.Context, _ volume.ID, ev ports.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func (e *events) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		out = append(out, ev.Reason)
	}
	return out
}

// cluster is three in-memory nodes sharing one state and one network.
type cluster struct {
	t      *testing.T
	state  *fakecluster.Store
	net    *faketransport.Network
	stores map[replica.Node]*memstore.Store
	// storeOverride is what n's volume manager uses instead of stores[n]
	// (a wrapper of it), when set.
	storeOverride map[replica.Node]ports.SnapshotStore
	events        *events
	cancel        map[replica.Node]context.CancelFunc
	done          map[replica.Node]chan struct{}
	reps          map[replica.Node]*replication.Replicator
	// recorder, when set, sees every write of the volume managers started.
	recorder *recordingState
	// stateOverride, when set, is the shared state the volume managers
	// started from now on use (a wrapper of state).
	stateOverride ports.ClusterState
	// log, when set, is the volume managers' logger (zap.NewNop else).
	log *zap.Logger
}

const volID = volume.ID("volID-1")

func newCluster(t *testing.T, rf int, nodes ...replica.Node) *cluster {
	c := &cluster{t: t, state: fakecluster.New(), net: faketransport.New(), stores: map[replica.Node]*memstore.Store{},
		events: &events{}, cancel: map[replica.Node]context.CancelFunc{}, done: map[replica.Node]chan struct{}{}, reps: map[replica.Node]*replication.Replicator{}}
	for i, n := range nodes {
		c.stores[n] = memstore.New(t.TempDir(), 10<<30, uint64(i+1))
		c.net.Add(n, c.stores[n])
	}
	// The first node holds the volume and is its primary, as after provisioning.
	first := nodes[0]
	if _, err := c.stores[first].CreateVolume(ctx, volID, ports.CreateOptions{CapacityBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	st := replica.State{Volume: volID, ReplicationFactor: rf, Epoch: 1, Primary: first, Replicas: []replica.Replica{{Node: first, Active: true}}}
	if _, err := c.state.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for n := range c.cancel {
			c.stop(n)
		}
	})
	return c
}

// recordingState keeps every state an Update wrote.
type recordingState struct {
	ports.ClusterState
	mu     sync.Mutex
	states []replica.State
}

func (r *recordingState) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	st, err := r.ClusterState.Update(ctx, id, fn)
	if err == nil {
		r.mu.Lock()
		r.states = append(r.states, st)
		r.mu.Unlock()
	}
	return st, err
}

// recordWrites makes the volume managers started from now on write
// through a recorder; writes returns what they wrote.
func (c *cluster) recordWrites() { c.recorder = &recordingState{ClusterState: c.state} }

func (c *cluster) writes() []replica.State {
	c.recorder.mu.Lock()
	defer c.recorder.mu.Unlock()
	return append([]replica.State(nil), c.recorder.states...)
}

func (c *cluster) start(n replica.Node) { c.startWith(n, func(*replication.Config) {}) }

// startWith starts n's volume manager with its configuration changed by opt.
func (c *cluster) startWith(n replica.Node, opt func(*replication.Config)) {
	c.create(n, opt)
	c.resume(n)
}

// create makes n's volume manager, not running: resume runs it, ticks
// steps it.
func (c *cluster) create(n replica.Node, opt func(*replication.Config)) {
	cfg := replication.Config{Node: n, Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: 20 * time.Millisecond, Keep: 3}
	opt(&cfg)
	var state ports.ClusterState = c.state
	if c.recorder != nil {
		state = c.recorder
	}
	if c.stateOverride != nil {
		state = c.stateOverride
	}
	log := zap.NewNop()
	if c.log != nil {
		log = c.log.With(zap.String("node", string(n)))
	}
	var store ports.SnapshotStore = c.stores[n]
	if o, ok := c.storeOverride[n]; ok {
		store = o
	}
	c.reps[n] = replication.New(cfg, store, shared(state), c.net, c.events, log)
}

// shared is state as a volume manager's shared state: watched when it
// can be (the fake and the wrappers that keep its Watch), else read
// every tick (the wrappers that hide it).
func shared(state ports.ClusterState) replication.SharedState {
	if s, ok := state.(replication.SharedState); ok {
		return s
	}
	return polled{state}
}

// polled is a shared state that cannot watch.
type polled struct{ ports.ClusterState }

func (polled) Watch(context.Context, volume.ID) (<-chan struct{}, error) {
	return nil, ports.ErrUnsupported
}

// resume runs n's volume manager (again, where it stopped) until stopped.
func (c *cluster) resume(n replica.Node) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r := c.reps[n]
	go func() { _ = r.Run(ctx); close(done) }()
	c.cancel[n], c.done[n] = cancel, done
}

// ticks steps n's volume manager, stopped, through k ticks of its own:
// the test's clock, not the machine's.
func (c *cluster) ticks(n replica.Node, k int) {
	c.t.Helper()
	if _, running := c.cancel[n]; running {
		c.t.Fatalf("%s's volume manager is running: stop it before stepping it", n)
	}
	for range k {
		c.reps[n].Step(ctx, replication.Tick)
	}
}

func (c *cluster) stop(n replica.Node) {
	if cancel, ok := c.cancel[n]; ok {
		cancel()
		<-c.done[n]
		delete(c.cancel, n)
	}
}

func (c *cluster) write(n replica.Node, content string) {
	info, err := c.stores[n].GetVolume(ctx, volID)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "data"), []byte(content), 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// eventually waits for cond, failing with what after 10 s.
func (c *cluster) eventually(what string, cond func() bool) {
	c.t.Helper()
	if !within(10*time.Second, cond) {
		st, _ := c.state.Get(ctx, volID)
		c.t.Fatalf("timed out waiting until %s; state %+v", what, st)
	}
}

// within polls cond, every 5 ms, until it holds (true) or timeout
// passed (false).
func within(timeout time.Duration, cond func() bool) bool {
	deadline := time.After(timeout)
	poll := time.NewTicker(5 * time.Millisecond)
	defer poll.Stop()
	for !cond() {
		select {
		case <-deadline:
			return cond()
		case <-poll.C:
		}
	}
	return true
}

// newestStored is the newest replication snapshot n's store holds.
func (c *cluster) newestStored(n replica.Node) replica.SnapshotNumber {
	list, _ := c.stores[n].ListSnapshots(ctx, volID)
	var newest replica.SnapshotNumber
	for _, s := range list {
		if num, _, ok := replica.ParseSnapshotName(s.Name); ok && num > newest {
			newest = num
		}
	}
	return newest
}

// newestStoredSnap is the newest replication snapshot n's store holds.
func (c *cluster) newestStoredSnap(n replica.Node) replica.Snap {
	list, _ := c.stores[n].ListSnapshots(ctx, volID)
	var newest replica.Snap
	for _, s := range list {
		if num, epoch, ok := replica.ParseSnapshotName(s.Name); ok {
			if sn := (replica.Snap{Number: num, Epoch: epoch, GUID: s.GUID}); sn.Newer(newest) {
				newest = sn
			}
		}
	}
	return newest
}

// holds reports whether n's copy reads content in its newest snapshot's
// data (the live file on a secondary is the received snapshot).
func (c *cluster) holds(n replica.Node, content string) bool {
	info, err := c.stores[n].GetVolume(ctx, volID)
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(info.MountPath, "data"))
	return err == nil && string(b) == content
}

func TestReplicasCatchUpFullThenIncrementallyAndALateJoinerToo(t *testing.T) {
	c := newCluster(t, 2, "a", "b", "c")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1", func() bool { return c.holds("b", "v1") })
	c.write("a", "v2")
	c.eventually("b holds v2", func() bool { return c.holds("b", "v2") })
	c.start("c") // a late joiner
	c.eventually("c holds v2", func() bool { return c.holds("c", "v2") })
	c.eventually("all three ready", func() bool {
		st, _ := c.state.Get(ctx, volID)
		ready := 0
		for _, r := range st.Replicas {
			if r.Ready {
				ready++
			}
		}
		return ready == 3
	})
}

func TestADivergedOldPrimaryIsRolledBackWithAnEventAndResyncs(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot > 0 && b.Snapshot == c.newestStored("b")
	})
	// b is cut off; a snapshots v2 that b never gets.
	c.stop("b")
	bHolds := c.newestStored("b")
	c.write("a", "v2-lost")
	st0, _ := c.state.Get(ctx, volID)
	before, _ := st0.Replica("a")
	c.eventually("a snapshotted v2 after b's newest", func() bool {
		st, _ := c.state.Get(ctx, volID)
		r, _ := st.Replica("a")
		return r.Snapshot > before.Snapshot && r.Snapshot > bHolds
	})
	// a is lost: b takes over in a new epoch and writes v3.
	c.stop("a")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { return ackThenTakeoverBehind(s, "b", "a") }); err != nil {
		t.Fatal(err)
	}
	c.start("b")
	c.write("b", "v3")
	c.eventually("b snapshotted in epoch 2", func() bool {
		st, _ := c.state.Get(ctx, volID)
		r, _ := st.Replica("b")
		return r.SnapshotEpoch == 2
	})
	// a comes back: its epoch-1 snapshot after the common base is rolled back.
	c.start("a")
	c.eventually("a holds v3", func() bool { return c.holds("a", "v3") })
	found := false
	for _, r := range c.events.reasons() {
		found = found || r == "RolledBack"
	}
	if !found {
		t.Fatalf("no RolledBack event; events: %v", c.events.reasons())
	}
	st, _ := c.state.Get(ctx, volID)
	if err := st.Validate(); err != nil || st.Primary != "b" {
		t.Fatalf("state after resync: %+v, %v", st, err)
	}
}

func TestTwoReplicasTerminatedAtOnceWithFactorTwoOfThreeOnlyOneDeletes(t *testing.T) {
	c := newCluster(t, 2, "a", "b", "c")
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b", "c"} {
		c.start(n)
	}
	c.eventually("b and c hold v1", func() bool { return c.holds("b", "v1") && c.holds("c", "v1") })
	c.eventually("all report the same snapshot", func() bool {
		st, _ := c.state.Get(ctx, volID)
		a, _ := st.Replica("a")
		return len(st.Replicas) == 3 && st.Replicas[1].Snapshot == a.Snapshot && st.Replicas[2].Snapshot == a.Snapshot
	})
	c.stop("a") // the primary stops snapshotting, so b and c stay at its snapshot
	c.stop("b")
	c.stop("c")
	// Demote a, as an unpublish would, so that no active primary is involved.
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error {
		a, _ := s.Replica("a")
		return replica.Demote(s, "a", s.Epoch, a.Holds())
	}); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2)
	for _, n := range []replica.Node{"b", "c"} {
		r := c.reps[n]
		go func() { results <- r.Terminate(context.Background()) }()
	}
	deleted := 0
	for i := 0; i < 2; i++ {
		err := <-results
		if err == nil {
			deleted++
		} else if !errors.Is(err, replica.ErrUnsafe) {
			t.Fatalf("Terminate: %v", err)
		}
	}
	if deleted != 1 {
		t.Fatalf("%d replicas deleted their copy; exactly one may (a plus one other must keep the newest)", deleted)
	}
	kept := 0
	for _, n := range []replica.Node{"b", "c"} {
		if _, err := c.stores[n].GetVolume(ctx, volID); err == nil {
			kept++
		}
	}
	st, _ := c.state.Get(ctx, volID)
	if kept != 1 || len(st.Replicas) != 2 {
		t.Fatalf("kept %d copies on b and c, list %+v", kept, st.Replicas)
	}
}

func TestAReplicaWithNoDataReportsSnapshotZeroAndWaitsForItsPeer(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.net.Cut("a") // b cannot reach the primary
	c.start("a")
	c.start("b")
	c.eventually("a holds a snapshot and b reports none, not ready", func() bool {
		st, _ := c.state.Get(ctx, volID)
		a, _ := st.Replica("a")
		b, ok := st.Replica("b")
		return a.Snapshot > 0 && ok && b.Snapshot == 0 && !b.Ready
	})
	if s := c.reps["b"].Status(); s.LastError == "" {
		t.Fatalf("b's status does not say why it is behind: %+v", s)
	}
	c.net.Heal("a")
	c.eventually("b holds v1 once the peer is reachable", func() bool { return c.holds("b", "v1") })
}

// Former primary a holds a CSI snapshot taken after ferry-1-1; b is primary
// of epoch 2 with ferry-2-2. a's incremental 1..2 cannot apply (a's newest
// snapshot is the CSI one): a rollback to ferry-1-1 would destroy it, so a
// keeps its copy and raises DiscardBlocked instead.
func TestAFormerPrimarysCSISnapshotIsNeverDestroyedByARollback(t *testing.T) {
	c := newCluster(t, 1, "a", "b")
	a, b := c.stores["a"], c.stores["b"]
	if _, err := a.CreateSnapshot(ctx, volID, "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	s, err := a.Send(ctx, ports.SendRequest{Volume: volID, To: "ferry-1-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Receive(ctx, volID, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := a.CreateSnapshot(ctx, volID, "csi-backup", nil); err != nil {
		t.Fatal(err)
	}
	b2, err := b.CreateSnapshot(ctx, volID, "ferry-2-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	la, _ := a.ListSnapshots(ctx, volID)
	if _, err = c.state.Update(ctx, volID, func(st *replica.State) error {
		st.Epoch, st.Primary = 2, "b"
		st.Replicas = []replica.Replica{
			{Node: "a", Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: la[0].GUID},
			{Node: "b", Snapshot: 2, SnapshotEpoch: 2, SnapshotGUID: b2.GUID, Active: true},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := replication.New(replication.Config{Node: "a", Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		a, c.state, c.net, c.events, zap.NewNop())
	// Until the replica has decided and said so (a fixed window was a
	// guess that a loaded machine could miss).
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	c.eventually("the discard refused with an event", func() bool {
		return strings.Contains(strings.Join(c.events.reasons(), ","), "DiscardBlocked")
	})
	cancel()
	<-done
	after, _ := a.ListSnapshots(ctx, volID)
	var names []string
	for _, s := range after {
		names = append(names, s.Name)
	}
	t.Logf("a now holds %v; events %v", names, c.events.reasons())
	if !strings.Contains(strings.Join(names, ","), "csi-backup") {
		t.Fatalf("the CSI snapshot csi-backup was destroyed; a holds %v", names)
	}
	if !strings.Contains(strings.Join(c.events.reasons(), ","), "DiscardBlocked") {
		t.Fatalf("no DiscardBlocked event; events %v", c.events.reasons())
	}
}

func TestSnapshotNowMakesThePrimarySnapshotWithoutWaitingForItsInterval(t *testing.T) {
	c := newCluster(t, 1, "a")
	c.write("a", "final write before unpublish")
	r := replication.New(replication.Config{Node: "a", Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		c.stores["a"], c.state, c.net, c.events, zap.NewNop())
	r.Step(ctx, replication.Requested) // the start
	for range 10 {                     // ten ticks: far from an hour
		r.Step(ctx, replication.Tick)
	}
	if n := c.newestStored("a"); n != 0 {
		t.Fatalf("the primary snapshotted (%d) before its interval or a request", n)
	}
	r.SnapshotNow()
	r.Step(ctx, replication.Requested)
	st, _ := c.state.Get(ctx, volID)
	if a, _ := st.Replica("a"); c.newestStored("a") != 1 || a.Snapshot != 1 {
		t.Fatalf("after the request the primary holds snapshot %d and reported %d, want 1 and 1", c.newestStored("a"), a.Snapshot)
	}
}

// b's copy shares nothing with the newest and must be replaced; the first
// full stream breaks half way. The old copy stays whole until a complete
// one has landed, and only the completed replacement raises Replaced.
func TestAReplacementThatFailsKeepsTheOldCopyUntilTheNewOneIsWhole(t *testing.T) {
	c := newCluster(t, 1, "a", "b")
	a, b := c.stores["a"], c.stores["b"]
	c.write("a", "the newest data")
	a3, err := a.CreateSnapshot(ctx, volID, "ferry-2-3", nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.CreateVolume(ctx, volID, ports.CreateOptions{CapacityBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "data"), []byte("an old copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	b1, err := b.CreateSnapshot(ctx, volID, "ferry-1-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.state.Update(ctx, volID, func(st *replica.State) error {
		st.Epoch, st.Primary = 2, "a"
		st.Replicas = []replica.Replica{
			{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: a3.GUID, Active: true, Ready: true},
			{Node: "b", Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: b1.GUID},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.net.BreakStreams("a", 16)
	c.recordWrites()
	c.start("b")
	c.eventually("b tried to replace its copy and failed", func() bool {
		return strings.Contains(c.reps["b"].Status().LastError, "mid-stream")
	})
	c.eventually("b forgot the target of its failed transfer", func() bool {
		// b retries, recording and forgetting on every attempt: look at
		// every state written since, not at one sample.
		forgotten := false
		for _, st := range c.writes() {
			b, _ := st.Replica("b")
			forgotten = forgotten || (b.Fetching.Number == 0 && st.Version != "")
		}
		return forgotten
	})
	c.stop("b")
	if !c.holds("b", "an old copy") {
		t.Fatal("a failed replacement destroyed b's old copy")
	}
	if list, _ := b.ListSnapshots(ctx, volID); len(list) != 1 || list[0].Name != "ferry-1-1" {
		t.Fatalf("b's snapshots after a failed replacement: %+v", list)
	}
	if r := c.events.reasons(); strings.Contains(strings.Join(r, ","), "Replaced") {
		t.Fatalf("Replaced raised for a replacement that failed: %v", r)
	}
	c.net.Heal("a")
	c.start("b")
	c.eventually("b holds the newest data", func() bool { return c.holds("b", "the newest data") })
	c.eventually("the replacement raised Replaced", func() bool {
		return strings.Contains(strings.Join(c.events.reasons(), ","), "Replaced")
	})
}

// b received snapshot 6 of epoch 2 (the only copy of the newest) and
// stopped before reporting it. Its epoch is in its name, so the stop lost
// nothing: asked to go, b sees that its copy is newer than a's 5 of epoch
// 1 and keeps it.
func TestAReceivedSnapshotKeepsItsEpochThroughAStopAndIsNeverDeletedAsOlder(t *testing.T) {
	c := newCluster(t, 1, "a", "b")
	a, b := c.stores["a"], c.stores["b"]
	a5, err := a.CreateSnapshot(ctx, volID, "ferry-1-5", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Send(ctx, ports.SendRequest{Volume: volID, To: "ferry-1-5"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Receive(ctx, volID, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	info, _ := b.GetVolume(ctx, volID)
	if err := os.WriteFile(filepath.Join(info.MountPath, "data"), []byte("written in epoch 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSnapshot(ctx, volID, "ferry-2-6", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.state.Update(ctx, volID, func(st *replica.State) error {
		st.Epoch, st.Primary = 2, "b"
		st.Replicas = []replica.Replica{{Node: "a", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: a5.GUID, Ready: true}, {Node: "b"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := replication.New(replication.Config{Node: "b", Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		b, c.state, c.net, c.events, zap.NewNop())
	if err := r.Terminate(ctx); !errors.Is(err, replica.ErrUnsafe) {
		t.Fatalf("Terminate of the only holder of the newest snapshot: %v, want ErrUnsafe", err)
	}
	if !c.holds("b", "written in epoch 2") {
		t.Fatal("b destroyed the only copy of the newest snapshot")
	}
}

// Unpublish: the primary's last writes are in a final snapshot recorded in
// the same compare-and-swap that ends its term; a replica that lacks it
// cannot be promoted until it has fetched it.
func TestReleaseSnapshotsTheLastWritesAndStepsDownCarryingThem(t *testing.T) {
	c := newCluster(t, 1, "a", "b")
	c.write("a", "the last write before unpublish")
	r := replication.New(replication.Config{Node: "a", Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		c.stores["a"], c.state, c.net, c.events, zap.NewNop())
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	r.Release()
	c.eventually("a released", func() bool { return r.Status().Released })
	st, _ := c.state.Get(ctx, volID)
	a, _ := st.Replica("a")
	if a.Active || a.Snapshot == 0 || a.Holds() != c.newestStoredSnap("a") {
		t.Fatalf("after release a is %+v; its store's newest is %+v", a, c.newestStoredSnap("a"))
	}
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { replica.Join(s, "b"); return replica.Promote(s, "b") }); !errors.Is(err, replica.ErrBehind) {
		t.Fatalf("b, without the final snapshot, was promoted: %v", err)
	}
}

// sleepRecorder is a clock whose Sleep returns at once and adds up what it
// was asked to wait (safe for the replicator's goroutine and the test's).
type sleepRecorder struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

func (c *sleepRecorder) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now, c.slept = c.now.Add(d), c.slept+d
	return ctx.Err()
}

func (c *sleepRecorder) total() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}

func TestAReceiversTransfersArePacedByItsMaxTransferRate(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	content := strings.Repeat("x", 2<<20)
	c.write("a", content)
	c.start("a")
	clock := &sleepRecorder{now: time.Unix(1_700_000_000, 0)}
	const rate = 256 << 10
	c.startWith("b", func(cfg *replication.Config) { cfg.MaxTransferRate, cfg.Clock = rate, clock })
	c.eventually("b holds a's data", func() bool { return c.holds("b", content) })
	// More than 2 MiB at 256 KiB/s, the first burst (32 KiB, the least one) free.
	if want := 8*time.Second - time.Second/8; clock.total() < want {
		t.Errorf("b's transfers waited %s for the rate in all, want at least %s", clock.total(), want)
	}
}

// A peer whose streams always fail must not cost a write or two per tick:
// the fetch target is recorded and forgotten once per attempt, and the
// attempts back off (1, 3, 7, ... ticks, up to MaxBackoffTicks).
func TestFailingTransfersBackOff(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "some data")
	c.start("a")
	c.eventually("a snapshotted", func() bool { return c.newestStored("a") > 0 })
	c.net.BreakStreams("a", 0)
	c.recordWrites()
	c.create("b", func(*replication.Config) {})
	c.ticks("b", 400)
	// 400 ticks: without back-off about 800 writes; with it 10 attempts
	// (after 1, 3, 7, ..., 63 ticks) of two writes each.
	if n := len(c.writes()); n > 22 {
		t.Fatalf("%d shared-state writes in 400 ticks of failing transfers, want at most 22 (back-off)", n)
	}
}

// A volume deleted while its replicas run (Kubernetes: its
// ReplicatedVolume gets a deletionTimestamp, a finalizer holds it): every
// replica, the active primary included, destroys its copy and leaves, and
// the state goes with the last one; a replica terminated afterwards has
// nothing left to do.
func TestADeletedVolumesReplicasDestroyTheirCopiesAndTheStateGoesWithTheLast(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "some data")
	c.start("a")
	c.start("b")
	c.eventually("b holds a's data", func() bool { return c.holds("b", "some data") })
	if err := c.state.Delete(ctx, volID); err != nil {
		t.Fatal(err)
	}
	gone := func(n replica.Node) bool {
		_, err := c.stores[n].GetVolume(ctx, volID)
		return errors.Is(err, ports.ErrNotFound)
	}
	c.eventually("both copies destroyed and the state gone", func() bool {
		_, err := c.state.Get(ctx, volID)
		return gone("a") && gone("b") && errors.Is(err, ports.ErrNotFound)
	})
	r := c.reps["b"]
	c.stop("b")
	if err := r.Terminate(ctx); err != nil {
		t.Fatalf("Terminate after the volume's deletion: %v", err)
	}
}

// A replica stopped while its volume was deleted finishes the deletion
// when terminated: its copy goes, then its entry, and with it the state.
func TestAReplicaStoppedDuringItsVolumesDeletionFinishesItOnTermination(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "some data")
	c.start("a")
	c.start("b")
	c.eventually("b holds a's data", func() bool { return c.holds("b", "some data") })
	r := c.reps["b"]
	c.stop("b")
	if err := c.state.Delete(ctx, volID); err != nil {
		t.Fatal(err)
	}
	c.eventually("a left", func() bool {
		st, err := c.state.Get(ctx, volID)
		_, listed := st.Replica("a")
		return err == nil && !listed
	})
	if err := r.Terminate(ctx); err != nil {
		t.Fatalf("Terminate during the volume's deletion: %v", err)
	}
	if _, err := c.stores["b"].GetVolume(ctx, volID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("b's copy outlived its volume: %v", err)
	}
	if _, err := c.state.Get(ctx, volID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("the state outlived the last replica: %v", err)
	}
}

// A copy that holds data and no replication snapshot is not destroyed
// when the volume's state disappears: it was never shipped anywhere (a
// secondary that somehow holds unreplicated data, or a plain volume a
// misconfigured volume manager reached), so it may be the only copy.
func TestACopyWithDataButNoReplicationSnapshotSurvivesItsStatesDeletion(t *testing.T) {
	store := memstore.New(t.TempDir(), 1<<30, 1)
	info, err := store.CreateVolume(ctx, "plain", ports.CreateOptions{CapacityBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "data"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	states := fakecluster.New()
	if _, err := states.Create(ctx, replica.State{Volume: "plain", ReplicationFactor: 2, Epoch: 1, Primary: "b",
		Replicas: []replica.Replica{{Node: "a"}, {Node: "b", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	r := replication.New(replication.Config{Node: "a", Volume: "plain", Tick: time.Millisecond, SnapshotInterval: time.Hour, Keep: 2},
		store, states, faketransport.New(), &events{}, zap.NewNop())
	r.Step(ctx, replication.Requested) // a observes its state and its data
	// The state disappears without the deletion protocol (its last entry
	// removed by hand): the copy is an orphan.
	if err := states.Delete(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := states.Update(ctx, "plain", func(s *replica.State) error { s.Replicas = nil; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.Terminate(ctx); !errors.Is(err, replica.ErrUnsafe) {
		t.Fatalf("Terminate: %v, want the copy kept (ErrUnsafe)", err)
	}
	if _, err := store.GetVolume(ctx, "plain"); err != nil {
		t.Fatalf("the unreplicated copy was destroyed: %v", err)
	}
}

// ackThenTakeover is a survivor's takeover of lost's volume by node,
// lost's guard having acknowledged every copy holding a snapshot as a
// taker before (the daemon does; the tests here run no daemon).
// ackThenTakeoverBehind is ackThenTakeover giving up every snapshot lost
// reported past node's: a primary of the memory store snapshots every
// interval (it never says "unchanged"), so under load it may have taken
// more than one past node's newest before it stopped.
func ackThenTakeoverBehind(s *replica.State, node, lost replica.Node) error {
	l, _ := s.Replica(lost)
	n, _ := s.Replica(node)
	return ackThenTakeover(s, node, lost, uint64(max(l.Snapshot, n.Snapshot)-n.Snapshot))
}

func ackThenTakeover(s *replica.State, node, lost replica.Node, lag uint64) error {
	if err := replica.Acknowledge(s, lost, s.Epoch, replica.Candidates(*s, lost)); err != nil {
		return err
	}
	return replica.Takeover(s, node, lost, lag)
}
