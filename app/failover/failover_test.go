package failover

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

var timing = liveness.Config{Renew: time.Second, Duration: 5 * time.Second, Margin: 500 * time.Millisecond}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *fakeClock) read() time.Duration { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) set(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = d }

type nopEvents struct{}

func (nopEvents) Record(context.Context, volume.ID, ports.Event) {}

func primaryState(vol volume.ID, primary replica.Node, others ...replica.Node) replica.State {
	st := replica.State{Volume: vol, ReplicationFactor: 1 + len(others), Epoch: 3, Primary: primary,
		Replicas: []replica.Replica{{Node: primary, Snapshot: 7, SnapshotEpoch: 3, Ready: true, Active: true}}}
	for _, o := range others {
		st.Replicas = append(st.Replicas, replica.Replica{Node: o, Snapshot: 7, SnapshotEpoch: 3, Ready: true, Taker: true})
	}
	return st
}

// The node's lease, renewed at 0 s, is held until 4.5 s; a renewal that
// fails after that leaves the primary here with a taker fenced once (its
// writers stopped, its pods' mounts removed), the one without a taker
// not; a renewal accepted again lets it write, and its pods are restarted
// off the fence's placeholder.
func TestTheGuardFencesAPrimaryOnlyOnceTheLeaseRanOutAndOnlyWhereAnotherNodeCouldTakeOver(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	store := mocks.NewMockSnapshotStore(ctrl)
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	vols.Saw(primaryState("single", "a"))
	vols.Saw(primaryState("elsewhere", "b", "a"))
	// Every local copy is known to the view: no fence of an unknown one.
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}, {ID: "single"}, {ID: "elsewhere"}}, nil).AnyTimes()
	// b's volume, with no pod here: looked at once, nothing mounted.
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("elsewhere")).Return(ports.VolumeInfo{ID: "elsewhere", MountPath: "/p/elsewhere", MountSource: "pool/elsewhere"}, nil)
	mounts.EXPECT().MountsOf("pool/elsewhere").Return([]string{"/p/elsewhere"}, nil)
	eff := newEffects(ctrl)
	ctx := context.Background()
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, primaryState("rep", "a", "b")); err != nil {
		t.Fatal(err)
	}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, eff, nopEvents{}, zap.NewNop())

	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	clock.set(4*time.Second + 400*time.Millisecond)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	if g.RenewOnce(ctx) == nil {
		t.Fatal("a failed renewal succeeded")
	}
	if next := g.Check(ctx); next > 100*time.Millisecond || next <= 0 {
		t.Fatalf("next check in %s, want at the lease's end (in 100 ms)", next)
	}
	clock.set(4*time.Second + 500*time.Millisecond)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}, nil)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/k/pods/x/mount"}, nil)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/k/pods/x/mount"}, "/p/rep").Return([]ports.StoppedProcess{{PID: 42, Command: "writer"}}, nil)
	g.Check(ctx)
	if g.Fenced("rep") == "" || g.Fenced("single") != "" || g.Fenced("elsewhere") != "" {
		t.Fatalf("fenced: rep %q, single %q, elsewhere %q", g.Fenced("rep"), g.Fenced("single"), g.Fenced("elsewhere"))
	}
	g.Check(ctx) // fenced once: no second Fence call (gomock fails on one)

	clock.set(6 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// Issue 21.6: no takeover came; the pods here sit on the fence's empty
	// placeholder. They are restarted (deleted for their controllers to
	// start again, and published anew), once.
	eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/x"}, nil)
	g.Check(ctx)
	if why := g.Fenced("rep"); why != "" {
		t.Fatalf("still fenced after a renewal: %s", why)
	}
	g.Check(ctx) // given back once: no second EvictPods (gomock fails on one)
}

// Without its lease a primary goes on writing while every taker promised.
func TestTheGuardWritesOnPromisesWithoutItsLease(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{now: 10 * time.Second} // never renewed
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b", "c"))
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, mocks.NewMockNodeLease(ctrl), vols, NewTakers("a", nil, zap.NewNop()),
		mocks.NewMockSnapshotStore(ctrl), mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop())
	g.Promised(liveness.Promise{From: "b", Until: 14 * time.Second}, liveness.Promise{From: "c", Until: 13 * time.Second})
	if v := g.Writable("rep"); !v.MayWrite || v.Until != 13*time.Second {
		t.Fatalf("%+v", v)
	}
	g.Check(context.Background()) // no fence: the mocks expect nothing
}

type leaseMap struct {
	mu   sync.Mutex
	vals map[replica.Node]ports.LeaseRecord
	err  error
}

func (l *leaseMap) Leases(context.Context) (map[replica.Node]ports.LeaseRecord, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[replica.Node]ports.LeaseRecord{}
	for k, v := range l.vals {
		out[k] = v
	}
	return out, l.err
}

func (l *leaseMap) renew(n replica.Node, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.vals[n] = ports.LeaseRecord{Value: v}
}

// Node a, primary of a volume copied on b and c, stops renewing. Both
// survivors observe it; only b, the successor, takes over (epoch + 1), and
// then removes a's placement, taints a, deletes a's replica pods of the
// volume and then its pods using it, in that order. c, deciding on the
// same view, changes nothing.
func TestOnlyTheSuccessorTakesOverAfterDurationPlusMarginAndCarriesOutTheEffects(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	if _, err := cluster.Create(ctx, primaryState("v", "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{}}
	leases.renew("a", "1")
	leases.renew("b", "1")
	leases.renew("c", "1")
	clock := &fakeClock{}
	local := func() ports.SnapshotStore {
		s := mocks.NewMockSnapshotStore(ctrl)
		s.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
		return s
	}
	effB := newEffects(ctrl)
	effC := newEffects(ctrl)
	for _, e := range []*mocks.MockFailoverEffects{effB, effC} {
		e.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	}
	prepB, prepC := make(preparer, 4), make(preparer, 4)
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, local(), effB, nopEvents{}, zap.NewNop(), WithPreparer(prepB))
	c := NewSurvivor(Config{Node: "c", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, local(), effC, nopEvents{}, zap.NewNop(), WithPreparer(prepC))
	step := func(at time.Duration) {
		clock.set(at)
		leases.renew("b", at.String())
		leases.renew("c", at.String())
		for _, s := range []*Survivor{c, b} {
			if err := s.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for at := time.Duration(0); at < 5500*time.Millisecond; at += 500 * time.Millisecond {
		step(at) // a's lease unchanged, not yet for duration + margin
	}
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "a" || st.Epoch != 3 {
		t.Fatalf("taken over early: %+v", st)
	}
	gomock.InOrder(
		effB.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil),
		effB.EXPECT().Taint(gomock.Any(), replica.Node("a"), true).Return(nil),
		effB.EXPECT().RemoveReplicaPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return([]string{"ferry-system/ferry-v-1a2b3c4d"}, nil),
		effB.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return([]string{"ns/app-0"}, nil),
	)
	step(5500 * time.Millisecond)
	st, _ := cluster.Get(ctx, "v")
	if st.Primary != "b" || st.Epoch != 4 {
		t.Fatalf("after the takeover: %+v", st)
	}
	if r, _ := st.Replica("a"); r.Active {
		t.Fatal("the lost primary is still active")
	}
	// b readies its copy for the writer at once (the remount, beside the
	// pods' rescheduling); c, which took nothing over, does not.
	select {
	case id := <-prepB:
		if id != "v" {
			t.Fatalf("b prepared %s, want v", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b took v over but did not prepare its copy for the writer")
	}
	step(6 * time.Second) // nothing more: effects done, b is the primary
	if len(prepB) > 0 || len(prepC) > 0 {
		t.Fatalf("prepared again (b %d) or by c, which took nothing over (%d)", len(prepB), len(prepC))
	}
}

// preparer records the volumes a survivor prepares for their writer.
type preparer chan volume.ID

func (p preparer) PrepareWriter(_ context.Context, id volume.ID) error {
	p <- id
	return nil
}

// A survivor whose own reads failed knows nothing of that time: the
// lease's age restarts when it reads again.
func TestASurvivorThatCouldNotReadTakesNobodyForLostUntilAFullDurationAfter(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	if _, err := cluster.Create(ctx, primaryState("v", "a", "b")); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}}}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	_ = b.Step(ctx)
	leases.err = errors.New("apiserver away")
	clock.set(60 * time.Second)
	if b.Step(ctx) == nil {
		t.Fatal("a failed read went unreported")
	}
	leases.err = nil
	clock.set(61 * time.Second)
	if err := b.Step(ctx); err != nil { // no takeover: the store mock expects no ListVolumes
		t.Fatal(err)
	}
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "a" {
		t.Fatalf("taken over right after the outage: %+v", st)
	}
}

type askerFunc func(node, asker replica.Node) (bool, time.Duration, error)

func (f askerFunc) Promise(_ context.Context, node, asker replica.Node) (bool, time.Duration, error) {
	return f(node, asker)
}

// The API server is away: the renewals fail, the guard asks the node that
// could take over, which promises; the primary is not fenced past its
// lease while the promises run, and is once they stop coming.
func TestTheGuardAsksTheTakersForPromisesWhenARenewalFails(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("apiserver away")).AnyTimes()
	store := mocks.NewMockSnapshotStore(ctrl)
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	granting := true
	var asked []replica.Node
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", nil, zap.NewNop()), store, mounts, fencer, nil, nopEvents{}, zap.NewNop(),
		WithPromises(askerFunc(func(node, asker replica.Node) (bool, time.Duration, error) {
			if asker != "a" {
				t.Fatalf("asked on behalf of %s", asker)
			}
			asked = append(asked, node)
			return granting, 4500 * time.Millisecond, nil
		})))
	ctx := context.Background()
	for at := time.Duration(0); at <= 20*time.Second; at += time.Second {
		clock.set(at)
		_ = g.RenewOnce(ctx)
		g.AskPromisesOnce(ctx)
		g.Check(ctx) // the mocks expect no fence
	}
	if len(asked) != 21 || asked[0] != "b" {
		t.Fatalf("asked %v", asked)
	}
	granting = false
	clock.set(21 * time.Second)
	g.AskPromisesOnce(ctx)
	g.Check(ctx) // the last promise, from 20 s, runs until 24.5 s
	clock.set(24500 * time.Millisecond)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}, nil)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep"}, nil)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep"}, "/p/rep").Return(nil, nil)
	g.Check(ctx)
	if g.Fenced("rep") == "" {
		t.Fatal("not fenced once the promises ran out")
	}
}

// The daemon restarted between its takeover's compare-and-swap and the
// effects: a new survivor finds them owed in the state (it is the active
// primary of a volume listing the lost node) and carries them out, once.
func TestASurvivorRestartedAfterItsTakeoverStillCarriesOutTheEffects(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	st := primaryState("v", "a", "b")
	if err := replica.Takeover(&st, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}}}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	gomock.InOrder(
		eff.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil),
		eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), true).Return(nil),
		eff.EXPECT().RemoveReplicaPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
		eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
	)
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	for at := time.Duration(0); at <= 8*time.Second; at += 500 * time.Millisecond {
		clock.set(at)
		if err := b.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The view shows another node active where this node's primary was,
// without a release here (a takeover while this node could read but not
// renew): a pod here that still mounts the copy read/write is fenced; a
// read-only one is not; a volume released here first never is.
func TestTheGuardFencesAVolumeTakenOverFromUnderAPodHere(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	lease.EXPECT().Renew(gomock.Any()).Return(nil).AnyTimes()
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return(nil, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	vols := NewVolumes()
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", nil, zap.NewNop()), store, mounts, fencer, nil, nopEvents{}, zap.NewNop())
	ctx := context.Background()
	_ = g.RenewOnce(ctx)
	info := func(id string) ports.VolumeInfo {
		return ports.VolumeInfo{ID: volume.ID(id), MountPath: "/p/" + id, MountSource: "pool/" + id}
	}
	taken := func(id string) replica.State {
		st := primaryState(volume.ID(id), "a", "b")
		if err := replica.Takeover(&st, "b", "a", 1); err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, id := range []string{"rw", "ro", "released"} {
		vols.Saw(primaryState(volume.ID(id), "a", "b"))
	}
	g.Check(ctx) // all three active here

	released := primaryState("released", "a", "b")
	released.Replicas[0].Active = false
	vols.Saw(released)
	g.Check(ctx)
	vols.Saw(taken("released")) // then promoted elsewhere: no fence, no read of the mounts
	vols.Saw(taken("rw"))
	vols.Saw(taken("ro"))
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rw")).Return(info("rw"), nil).Times(2)
	mounts.EXPECT().MountsOf("pool/rw").Return([]string{"/p/rw", "/k/pods/x/mount"}, nil).Times(2)
	mounts.EXPECT().MountAt("/k/pods/x/mount").Return(ports.Mount{Source: "pool/rw"}, true, nil)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rw", "/k/pods/x/mount"}, "/p/rw").Return([]ports.StoppedProcess{{PID: 7, Command: "db"}}, nil)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("ro")).Return(info("ro"), nil)
	mounts.EXPECT().MountsOf("pool/ro").Return([]string{"/p/ro", "/k/pods/y/mount"}, nil)
	mounts.EXPECT().MountAt("/k/pods/y/mount").Return(ports.Mount{Source: "pool/ro", ReadOnly: true}, true, nil)
	g.Check(ctx)
	g.Check(ctx) // once: the mocks refuse a second fence
}

// newEffects is a mock of the takeover's effects in a cluster where no
// node is declared out of service.
func newEffects(ctrl *gomock.Controller) *mocks.MockFailoverEffects {
	eff := mocks.NewMockFailoverEffects(ctrl)
	eff.EXPECT().OutOfService(gomock.Any()).Return(nil, nil).AnyTimes()
	return eff
}

type recordedEvents struct {
	mu  sync.Mutex
	got []ports.Event
}

func (r *recordedEvents) Record(_ context.Context, _ volume.ID, e ports.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e)
}

// Node a released the volume (its final snapshot 8 recorded) and is lost
// before b or c fetched it. b, the successor, takes the released volume
// over: the primary of epoch 4, inactive, a's 8 given up and named in a
// FinalSnapshotLost event; a's placement of the volume goes, but a is
// neither tainted nor are pods deleted there (none of the volume runs, and
// its copy there resyncs only once the volume is published again).
func TestASurvivorTakesOverAReleasedVolumeWhoseFinalSnapshotOnlyTheLostNodeHolds(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	st := primaryState("v", "a", "b", "c")
	st.Replicas[0].Active, st.Replicas[0].Snapshot = false, 8
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{}}
	for _, n := range []replica.Node{"a", "b", "c"} {
		leases.renew(n, "1")
	}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	effB, effC := newEffects(ctrl), newEffects(ctrl)
	for _, e := range []*mocks.MockFailoverEffects{effB, effC} {
		e.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	}
	events := &recordedEvents{}
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, effB, events, zap.NewNop())
	c := NewSurvivor(Config{Node: "c", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, effC, events, zap.NewNop())
	step := func(at time.Duration) {
		clock.set(at)
		leases.renew("b", at.String())
		leases.renew("c", at.String())
		for _, s := range []*Survivor{c, b} {
			if err := s.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for at := time.Duration(0); at < 5500*time.Millisecond; at += 500 * time.Millisecond {
		step(at)
	}
	effB.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil) // no Taint, no EvictPods
	step(5500 * time.Millisecond)
	got, _ := cluster.Get(ctx, "v")
	b2, _ := got.Replica("b")
	a2, _ := got.Replica("a")
	if got.Primary != "b" || got.Epoch != 4 || b2.Active || !a2.OnFencedBranch() {
		t.Fatalf("after the released takeover: %+v", got)
	}
	if len(events.got) != 1 || events.got[0].Reason != "FinalSnapshotLost" || !strings.Contains(events.got[0].Message, "ferry-3-8") || !strings.Contains(events.got[0].Message, "ferry-3-7") {
		t.Fatalf("events %+v, want one FinalSnapshotLost naming ferry-3-8 given up and ferry-3-7 kept", events.got)
	}
	step(6 * time.Second) // nothing more: the mocks refuse a second Unplace
}

// A node back from a loss lifts its fenced taint although a copy there
// is still on the branch a released volume's takeover left: nothing newer
// exists to resync it from until that volume is published again. A copy
// that can resync (its volume's line has a newer snapshot) still holds
// the taint until it is ready.
func TestTheTaintIsLiftedOverACopyThatCannotResyncYet(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	st := primaryState("v", "a", "b")
	st.Replicas[0].Active, st.Replicas[0].Snapshot = false, 8
	if _, err := replica.TakeoverReleased(&st, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "b": {Value: "1"}}}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("")).Return([]ports.SnapshotInfo{{Volume: "v", Name: "ferry-3-8"}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), replica.Node("a")).Return(true, nil).AnyTimes()
	eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), false).Return(nil)
	// a's daemon runs and its lease renews (the taint is looked at only
	// then).
	renewing := func(s *Survivor, clock *fakeClock, value string) {
		t.Helper()
		if err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
		clock.set(time.Second)
		leases.renew("a", value)
		if err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clock := &fakeClock{}
	a := NewSurvivor(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	renewing(a, clock, "2")
	// b snapshots in epoch 4 (published, say): a can resync, and must
	// before the taint goes.
	if _, err := cluster.Update(ctx, "v", func(s *replica.State) error {
		return replica.Report(s, "b", replica.Snap{Number: 9, Epoch: 4}, true)
	}); err != nil {
		t.Fatal(err)
	}
	clock2 := &fakeClock{}
	a2 := NewSurvivor(Config{Node: "a", Lease: timing, Lag: 1}, clock2.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	renewing(a2, clock2, "3") // the mock refuses a second lift
}

// The survivor reads again at the instant a silent node's lease runs out
// (duration + margin after the read that last saw it change), not at its
// next period: a node lost is taken for lost up to a period sooner.
func TestTheSurvivorReadsAgainWhenALeaseRunsOut(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{}}
	leases.renew("a", "1")
	leases.renew("b", "1")
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return(nil, nil).AnyTimes()
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	ctx := context.Background()
	for at := time.Duration(0); at <= 4*time.Second; at += time.Second {
		clock.set(at)
		leases.renew("b", at.String())
		if err := b.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if at < 4*time.Second {
			if got := b.nextStep(at); got != time.Second {
				t.Fatalf("at %s the next read waits %s, want the period", at, got)
			}
		}
	}
	clock.set(4700 * time.Millisecond) // a step begun at 4.6 s ended now
	if got := b.nextStep(4600 * time.Millisecond); got != 800*time.Millisecond {
		t.Fatalf("the next read waits %s, want 800ms: a's lease, unchanged since 0, runs out at 5.5 s, before the period's 5.6 s", got)
	}
}

// A fence of a term taken over while fenced says nothing of the node's
// next term of the volume: once a is the primary again (epoch 5), its
// new pods are not restarted as if given back, and when its lease runs
// out again the new term is fenced (review of issue 21: the old fence
// carried over, so the new term's pods were evicted, or never fenced).
func TestAFenceOfATermTakenOverDoesNotCarryIntoTheNextTerm(t *testing.T) {
	pod := ""
	f := newRepGuard(t, func(string) ([]string, error) {
		if pod == "" {
			return []string{"/p/rep"}, nil
		}
		return []string{"/p/rep", pod}, nil
	})
	f.mounts.EXPECT().MountAt(gomock.Any()).Return(ports.Mount{Source: "pool/rep"}, true, nil).AnyTimes()
	clock, lease, fencer, vols, g, ctx := f.clock, f.lease, f.fencer, f.vols, f.g, context.Background()

	// Term 3: the lease runs out, the pod's mount is fenced.
	pod = "/k/pods/x/mount"
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	clock.set(4*time.Second + 500*time.Millisecond)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/k/pods/x/mount"}, "/p/rep").DoAndReturn(func(context.Context, []string, string) ([]ports.StoppedProcess, error) {
		pod = "" // covered by the placeholder
		return nil, nil
	})
	g.Check(ctx)
	if g.Fenced("rep") == "" {
		t.Fatal("term 3 not fenced")
	}
	// b takes over (epoch 4); later a is the primary again (epoch 5), b
	// its taker, and a new pod mounts the copy.
	taken := primaryState("rep", "b", "a")
	taken.Epoch = 4
	vols.Saw(taken)
	g.Check(ctx)
	again := primaryState("rep", "a", "b")
	again.Epoch = 5
	vols.Saw(again)
	pod = "/k/pods/y/mount"
	clock.set(6 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	g.Check(ctx) // no EvictPods: the new term's pods were never fenced (gomock fails on one)
	if why := g.Fenced("rep"); why != "" {
		t.Fatalf("term 5 is taken for fenced: %s", why)
	}
	// Term 5's lease runs out: it is fenced on its own.
	clock.set(10*time.Second + 500*time.Millisecond)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/k/pods/y/mount"}, "/p/rep").Return(nil, nil)
	g.Check(ctx)
	if g.Fenced("rep") == "" {
		t.Fatal("term 5 not fenced once its lease ran out")
	}
}

// A read/write publish's claim is refused while the guard keeps the
// volume fenced here, or while the node may not write it (review of
// issue 21: a pod published during the guard's fence wrote unfenced, a
// term being fenced once).
func TestAClaimWaitsWhileTheGuardFencesOrTheNodeMayNotWrite(t *testing.T) {
	f := newRepGuard(t, func(string) ([]string, error) { return []string{"/p/rep", "/k/pods/x/mount"}, nil })
	clock, lease, fencer, eff, takers, g, ctx := f.clock, f.lease, f.fencer, f.eff, f.takers, f.g, context.Background()
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := takers.Claim(ctx, "rep"); err != nil {
		t.Fatalf("claim while the lease is held: %v", err)
	}
	clock.set(4*time.Second + 500*time.Millisecond) // the lease ran out, b has not promised
	if err := takers.Claim(ctx, "rep"); err == nil || !strings.Contains(err.Error(), "may not write") {
		t.Fatalf("claim once the lease ran out: %v, want refused", err)
	}
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), "/p/rep").Return(nil, nil)
	g.Check(ctx)
	clock.set(5 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// Renewed, but not yet given back (the next check does it): still fenced.
	if err := takers.Claim(ctx, "rep"); err == nil || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("claim while fenced: %v, want refused", err)
	}
	eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return(nil, nil)
	g.Check(ctx)
	if err := takers.Claim(ctx, "rep"); err != nil {
		t.Fatalf("claim once given back: %v", err)
	}
}

// repGuard is node a's guard over one volume "rep" whose primary is a
// (epoch 3) and taker b, its copy at /p/rep, the node's mounts of it as
// mountsOf says.
type repGuard struct {
	clock  *fakeClock
	lease  *mocks.MockNodeLease
	mounts *mocks.MockMountTable
	fencer *mocks.MockFencer
	eff    *mocks.MockFailoverEffects
	vols   *Volumes
	takers *Takers
	g      *Guard
}

func newRepGuard(t *testing.T, mountsOf func(string) ([]string, error)) *repGuard {
	t.Helper()
	ctrl := gomock.NewController(t)
	f := &repGuard{clock: &fakeClock{}, lease: mocks.NewMockNodeLease(ctrl), mounts: mocks.NewMockMountTable(ctrl),
		fencer: mocks.NewMockFencer(ctrl), eff: newEffects(ctrl), vols: NewVolumes()}
	store := mocks.NewMockSnapshotStore(ctrl)
	f.vols.Saw(primaryState("rep", "a", "b"))
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}, nil).AnyTimes()
	f.mounts.EXPECT().MountsOf("pool/rep").DoAndReturn(mountsOf).AnyTimes()
	cluster := fakecluster.New()
	if _, err := cluster.Create(context.Background(), primaryState("rep", "a", "b")); err != nil {
		t.Fatal(err)
	}
	f.takers = NewTakers("a", cluster, zap.NewNop())
	f.g = NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, f.clock.read, f.lease, f.vols, f.takers, store, f.mounts, f.fencer, f.eff, nopEvents{}, zap.NewNop())
	return f
}

// A node paused past its lease (a stalled VM): on waking its renewal may
// land before its guard looks, and the lease is held again, yet a
// survivor may have taken its volume over meanwhile. A term whose lease
// ran out before the renewal was sent is fenced first, and given back as
// after any fence (by the resume's compare-and-swap, which a takeover
// refuses); without takers (single) nothing changes.
func TestARenewalAfterTheLeaseRanOutFencesBeforeTheNodeWritesAgain(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	store := mocks.NewMockSnapshotStore(ctrl)
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	vols.Saw(primaryState("single", "a"))
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}, {ID: "single"}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	ctx := context.Background()
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, primaryState("rep", "a", "b")); err != nil {
		t.Fatal(err)
	}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, eff, nopEvents{}, zap.NewNop())
	lease.EXPECT().Renew(gomock.Any()).Return(nil).Times(2)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	g.Check(ctx) // the lease held: nothing fenced (the mocks expect no Fence)

	clock.set(10 * time.Second) // woken: the lease ran out at 4.5 s
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}, nil)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/k/pods/x/mount"}, nil)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/k/pods/x/mount"}, "/p/rep").Return([]ports.StoppedProcess{{PID: 42, Command: "writer"}}, nil)
	g.Check(ctx)
	if g.Fenced("rep") == "" || g.Fenced("single") != "" {
		t.Fatalf("after a renewal sent past the lease's end: rep fenced %q, single fenced %q; want rep only", g.Fenced("rep"), g.Fenced("single"))
	}
	// No takeover came: the pods go back, once.
	eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/x"}, nil)
	g.Check(ctx)
	g.Check(ctx)
	if why := g.Fenced("rep"); why != "" {
		t.Fatalf("still fenced with the lease held and no takeover: %s", why)
	}
}

// lostPrimary is survivor b of volume v, whose primary is a, reading the
// leases in leases on a fake clock; step(at) renews b's own lease (when
// renewOwn) and runs one Step at at.
type lostPrimary struct {
	b       *Survivor
	cluster *fakecluster.Store
	eff     *mocks.MockFailoverEffects
	step    func(at time.Duration)
}

func newLostPrimary(t *testing.T, leases *leaseMap, renewOwn func(at time.Duration) bool, opts ...SurvivorOption) *lostPrimary {
	t.Helper()
	ctrl := gomock.NewController(t)
	p := &lostPrimary{cluster: fakecluster.New()}
	if _, err := p.cluster.Create(context.Background(), primaryState("v", "a", "b")); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	p.eff = newEffects(ctrl)
	p.eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	p.b = NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, p.cluster, nil, store, p.eff, nopEvents{}, zap.NewNop(), opts...)
	p.step = func(at time.Duration) {
		clock.set(at)
		if renewOwn(at) {
			leases.vals["b"] = ports.LeaseRecord{Value: at.String(), Duration: timing.Duration}
		}
		if err := p.b.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// state is v's state now.
func (p *lostPrimary) state() replica.State {
	st, _ := p.cluster.Get(context.Background(), "v")
	return st
}

// expectTakeover expects the effects of taking v over from a, once.
func (p *lostPrimary) expectTakeover() {
	p.eff.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil)
	p.eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), true).Return(nil)
	p.eff.EXPECT().RemoveReplicaPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil)
	p.eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil)
}

// A lost node that declared a longer lease than the survivor's own (a
// node of another release, mid-update) holds it for its own duration:
// the survivor takes it over only after that plus the margin.
func TestASurvivorWaitsOutTheLongerLeaseALostNodeDeclared(t *testing.T) {
	longer := timing.Duration + 3*time.Second
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1", Duration: longer}}}
	p := newLostPrimary(t, leases, func(time.Duration) bool { return true })
	for at := time.Duration(0); at < longer+timing.Margin; at += 500 * time.Millisecond {
		p.step(at)
	}
	if st := p.state(); st.Primary != "a" {
		t.Fatalf("taken over at %s, before a's own lease of %s and the margin ran out: %+v", longer+timing.Margin-500*time.Millisecond, longer, st)
	}
	p.expectTakeover()
	p.step(longer + timing.Margin)
	if st := p.state(); st.Primary != "b" {
		t.Fatalf("not taken over once a's own lease and the margin ran out: %+v", st)
	}
}

// A daemon that replaced one on its node (a rolling update, a restart
// with a shorter --lease-duration) waits out the promises the one before
// may have given on its longer terms, which lived in its memory only: it
// reads those terms from its node's Lease, or from its publisher once it
// renewed it.
func TestARestartedSurvivorWaitsOutItsPredecessorsTerms(t *testing.T) {
	for _, c := range []struct {
		name      string
		own       time.Duration // what the node's Lease declares at the first read
		published time.Duration // what the publisher found there
	}{{"read from its node's Lease", timing.Duration + 3*time.Second, 0}, {"from its publisher", timing.Duration, timing.Duration + 3*time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "b": {Value: "1", Duration: c.own}}}
			// b's daemon renews its own Lease on its own terms after its first read.
			p := newLostPrimary(t, leases, func(at time.Duration) bool { return at > 0 },
				WithPredecessor(func() time.Duration { return c.published }))
			terms := timing.Duration + 3*time.Second
			for at := time.Duration(0); at < terms+timing.Margin; at += 500 * time.Millisecond {
				p.step(at)
			}
			if st := p.state(); st.Primary != "a" {
				t.Fatalf("a taken over before the predecessor's terms (%s) and the margin ran out: %+v", terms, st)
			}
			p.expectTakeover()
			p.step(terms + timing.Margin)
			if st := p.state(); st.Primary != "b" {
				t.Fatalf("not taken over once they ran out: %+v", st)
			}
		})
	}
}

// A renewal the API server holds (it stalls, answering nothing) has the
// takers asked for their promises beside it after half a period, not
// once it failed: with a short lease, the promises must be in before it
// runs out.
func TestAStalledRenewalHasThePromisesAskedBesideIt(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	stalled, release := make(chan struct{}), make(chan struct{})
	lease := mocks.NewMockNodeLease(ctrl)
	lease.EXPECT().Renew(gomock.Any()).DoAndReturn(func(context.Context) error {
		close(stalled)
		<-release
		return nil
	})
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	asked := make(chan replica.Node, 4)
	quick := liveness.Config{Renew: 20 * time.Millisecond, Duration: 5 * time.Second, Margin: 500 * time.Millisecond}
	g := NewGuard(Config{Node: "a", Lease: quick, Lag: 1}, clock.read, lease, vols, NewTakers("a", nil, zap.NewNop()), store,
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(),
		WithPromises(askerFunc(func(node, _ replica.Node) (bool, time.Duration, error) {
			asked <- node
			return true, 4500 * time.Millisecond, nil
		})))
	done := make(chan error, 1)
	go func() { done <- g.renewOrAsk(context.Background()) }()
	<-stalled
	select {
	case n := <-asked:
		if n != "b" {
			t.Fatalf("asked %s, want b", n)
		}
	case err := <-done:
		t.Fatalf("the renewal returned (%v) before any promise was asked", err)
	case <-time.After(10 * time.Second): // a failure's bound only: the ask comes after 10 ms
		t.Fatal("no promise asked while the renewal stalled")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Each promise reaches the guard's check as it comes, not once the
// slowest taker answered: the check (and the permit the watchdogs read)
// learns of a promise while another taker is still being asked.
func TestEachPromiseWakesTheCheckAsItComes(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b", "c"))
	slow := make(chan struct{})
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, mocks.NewMockNodeLease(ctrl), vols, NewTakers("a", nil, zap.NewNop()), store,
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(),
		WithPromises(askerFunc(func(node, _ replica.Node) (bool, time.Duration, error) {
			if node == "c" {
				<-slow
			}
			return true, 4500 * time.Millisecond, nil
		})))
	asked := make(chan struct{})
	go func() { g.AskPromisesOnce(context.Background()); close(asked) }()
	select {
	case <-g.renewed:
	case <-asked:
		t.Fatal("the round ended before c answered")
	case <-time.After(10 * time.Second): // a failure's bound only
		t.Fatal("b's promise did not wake the check while c was still asked")
	}
	close(slow)
	<-asked
}
