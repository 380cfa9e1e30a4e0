package failover

import (
	"context"
	"errors"
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

// permitBox is the node's permit and fence records in memory; on publish
// it also calls seen (what the world looked like then).
type permitBox struct {
	mu        sync.Mutex
	published []liveness.Permit
	records   map[volume.ID]string
	seen      func(liveness.Permit)
}

func (b *permitBox) Publish(p liveness.Permit, now func() time.Duration) error {
	now() // the guard's clock is the test's: instants are kept as they are
	b.mu.Lock()
	b.published = append(b.published, p)
	seen := b.seen
	b.mu.Unlock()
	if seen != nil {
		seen(p)
	}
	return nil
}

func (b *permitBox) last(t *testing.T) liveness.Permit {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.published) == 0 {
		t.Fatal("no permit published")
	}
	return b.published[len(b.published)-1]
}

func (b *permitBox) count() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.published) }

func (b *permitBox) Record(id volume.ID, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.records == nil {
		b.records = map[volume.ID]string{}
	}
	b.records[id] = reason
	return nil
}

func (b *permitBox) Recorded() (map[volume.ID]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[volume.ID]string{}
	for k, v := range b.records {
		out[k] = v
	}
	return out, nil
}

func (b *permitBox) Clear(id volume.ID, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.records[id] == reason {
		delete(b.records, id)
	}
	return nil
}

// unackedState is vol with its primary on a and a copy on b holding a
// snapshot that a has not acknowledged as a taker.
func unackedState(vol volume.ID) replica.State {
	st := primaryState(vol, "a", "b")
	st.Replicas[1].Taker = false
	return st
}

// The guard publishes its own verdicts, volume by volume, once its first
// renewal was answered (before, the permit of its predecessor stands): the
// lease's end while it holds it; a volume with takers passed once they
// neither renewed nor promised; a volume whose primary here acknowledged
// nobody Forever, as the guard never fences it.
func TestTheGuardPublishesItsVerdictsAsTheNodesPermit(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}, {ID: "single"}, {ID: "elsewhere"}}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), gomock.Any()).Return(ports.VolumeInfo{}, ports.ErrNotFound).AnyTimes()
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	vols.Saw(unackedState("single"))
	vols.Saw(primaryState("elsewhere", "b", "a"))
	box := &permitBox{}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", nil, zap.NewNop()), store,
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))
	ctx := context.Background()

	g.Check(ctx)
	if n := box.count(); n != 0 {
		t.Fatalf("%d permit(s) published before the first renewal was answered", n)
	}
	clock.set(time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	p := box.last(t)
	held := timing.Held(time.Second)
	if p.Deadline("rep") != held || p.Deadline("elsewhere") != held || p.Deadline("unknown") != held || p.Deadline("single") != liveness.Forever || p.Margin != timing.Margin {
		t.Fatalf("lease held until %s: %+v", held, p)
	}

	clock.set(held)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	g.Check(ctx) // fences rep: the store answers NotFound (no copy), which the guard takes as nothing to fence
	p = box.last(t)
	if p.Deadline("rep") > held || p.Deadline("unknown") > held || p.Deadline("single") != liveness.Forever {
		t.Fatalf("lease ran out at %s: %+v", held, p)
	}
}

// A taker is acknowledged only while the node holds its lease and only
// once the permit out there bounds its volume by the lease: the copy on b
// of "single" (Forever until then) is acknowledged after a permit was
// published with single's deadline at the lease's end, which a compare-
// and-swap seen by the test had not yet flagged. Once bounded, the
// volume stays so in its term, whatever the ledger shows.
func TestATakerIsAcknowledgedOnlyOnceThePermitBoundsItsVolume(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	clock := &fakeClock{}
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, unackedState("single")); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Create(ctx, unackedState("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Create(ctx, unackedState("late")); err != nil {
		t.Fatal(err)
	}
	lease := mocks.NewMockNodeLease(ctrl)
	vols := NewVolumes()
	vols.Saw(unackedState("single"))
	vols.Saw(unackedState("other"))
	vols.Saw(unackedState("late"))
	takers := NewTakers("a", cluster, zap.NewNop())
	box := &permitBox{}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, takers, mocks.NewMockSnapshotStore(ctrl),
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))

	// No lease yet (this daemon has not renewed): refused.
	if err := takers.Acknowledge(ctx, "single"); err == nil {
		t.Fatal("a taker was acknowledged without the lease")
	}
	if st, _ := cluster.Get(ctx, "single"); st.Replicas[1].Taker {
		t.Fatal("the copy was flagged a taker")
	}
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := box.last(t).Deadline("single"); d != liveness.Forever {
		t.Fatalf("single, nobody acknowledged, may write until %s", d)
	}
	box.mu.Lock()
	bounded := false
	box.seen = func(p liveness.Permit) {
		st, _ := cluster.Get(ctx, "single")
		if bounded || p.Deadline("single") == liveness.Forever {
			return
		}
		bounded = true
		if st.Replicas[1].Taker {
			t.Errorf("single was bounded (%s) only after b was flagged a taker", p.Deadline("single"))
		}
	}
	box.mu.Unlock()
	if err := takers.Acknowledge(ctx, "single"); err != nil {
		t.Fatal(err)
	}
	if st, _ := cluster.Get(ctx, "single"); !st.Replicas[1].Taker || !bounded {
		t.Fatalf("b acknowledged: %v; single bounded first: %v", st.Replicas[1].Taker, bounded)
	}
	if d := box.last(t).Deadline("single"); d != timing.Held(0) {
		t.Fatalf("single may write until %s after its acknowledgement, want the lease's end %s", d, timing.Held(0))
	}
	// The guard bounds a volume before its ledger knows the taker; a check
	// between the two publishes the bound, not Forever.
	if err := g.boundBeforeAcknowledge("other", 3); err != nil {
		t.Fatal(err)
	}
	g.Check(ctx)
	if d := box.last(t).Deadline("other"); d == liveness.Forever {
		t.Fatal("a volume whose taker is being acknowledged was published Forever again")
	}
	// The lease ran out at 4.5 s: no taker is acknowledged (its bound
	// would have passed already).
	clock.set(5 * time.Second)
	if err := takers.Acknowledge(ctx, "late"); err == nil {
		t.Fatal("a taker was acknowledged after the lease ran out")
	}
	if st, _ := cluster.Get(ctx, "late"); st.Replicas[1].Taker {
		t.Fatal("the copy of late was flagged a taker")
	}
}

// A volume its volume manager's watchdog fenced (its record) gets its
// pods back once the permit lets it write again, once; the record is
// cleared. While its deadline has passed, nothing is given back.
func TestTheGuardGivesBackThePodsOfAVolumeItsWatchdogFenced(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	clock := &fakeClock{}
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, primaryState("rep", "a", "b")); err != nil {
		t.Fatal(err)
	}
	lease := mocks.NewMockNodeLease(ctrl)
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	vols := NewVolumes()
	vols.Saw(primaryState("rep", "a", "b"))
	eff := mocks.NewMockFailoverEffects(ctrl)
	box := &permitBox{}
	mounts, fencer := mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl)
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store,
		mounts, fencer, eff, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))
	// The daemon was down: the watchdog fenced rep and recorded it. The
	// new daemon cannot renew yet: nothing is given back.
	_ = box.Record("rep", "the deadline passed")
	clock.set(10 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	// (The guard fences rep itself meanwhile, without the lease.)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{}, ports.ErrNotFound)
	g.Check(ctx)
	if got, _ := box.Recorded(); got["rep"] == "" {
		t.Fatal("the record went while the volume may not write")
	}
	vols.Saw(primaryState("rep", "a", "b")) // its copy is here after all
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	// The watchdog stopped the holders and left the mounts: the guard's
	// fence finishes it before the pods restart.
	info := ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(info, nil)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/pods/x/mount"}, nil)
	gomock.InOrder(
		fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/pods/x/mount"}, "/p/rep").Return([]ports.StoppedProcess{{PID: 7, Command: "app"}}, nil),
		eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/app-0"}, nil),
	)
	g.Check(ctx)
	if got, _ := box.Recorded(); len(got) != 0 {
		t.Fatalf("records left: %v", got)
	}
	g.Check(ctx) // given back once: no second EvictPods (gomock fails on one)
}

// A primary here with taker b, whose promise outlasts the lease (its
// renewals fail on an overloaded API server: the permit carries the
// promise, liveness.Decide), acknowledges a new copy c while it still
// holds the lease: before c is written down as a taker, the permit is
// back at the lease's end (c promised nothing; the daemon dying right
// after must leave a deadline 2 margins before c may take over); once the
// ledger lists c, Decide holds it there itself until c promises.
func TestANewTakersAcknowledgementHoldsThePermitAtTheLeasesEndDespiteOlderPromises(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	clock := &fakeClock{}
	cluster := fakecluster.New()
	st := primaryState("rep", "a", "b")
	st.ReplicationFactor = 3
	st.Replicas = append(st.Replicas, replica.Replica{Node: "c", Snapshot: 7, SnapshotEpoch: 3, Ready: true})
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	lease := mocks.NewMockNodeLease(ctrl)
	vols := NewVolumes()
	vols.Saw(st)
	takers := NewTakers("a", cluster, zap.NewNop())
	box := &permitBox{}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, takers, mocks.NewMockSnapshotStore(ctrl),
		mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil { // held until 4.5 s
		t.Fatal(err)
	}
	clock.set(3 * time.Second)
	g.Promised(liveness.Promise{From: "b", Until: 7500 * time.Millisecond})
	g.Check(ctx)
	if d := box.last(t).Deadline("rep"); d != 7500*time.Millisecond {
		t.Fatalf("rep may write until %s, want b's promise's end", d)
	}
	box.mu.Lock()
	box.seen = func(p liveness.Permit) {
		if got, _ := cluster.Get(ctx, "rep"); !got.Replicas[2].Taker && p.Deadline("rep") > timing.Held(0) {
			t.Errorf("published %s for rep before c was written down, beyond the lease's end %s", p.Deadline("rep"), timing.Held(0))
		}
	}
	box.mu.Unlock()
	var capped liveness.Permit
	box.mu.Lock()
	n := len(box.published)
	box.mu.Unlock()
	if err := takers.Acknowledge(ctx, "rep"); err != nil {
		t.Fatal(err)
	}
	box.mu.Lock()
	if len(box.published) == n {
		box.mu.Unlock()
		t.Fatal("no permit published before c's acknowledgement")
	}
	capped = box.published[n]
	box.mu.Unlock()
	if d := capped.Deadline("rep"); d != timing.Held(0) {
		t.Fatalf("rep held until %s while c is acknowledged, want the lease's end %s", d, timing.Held(0))
	}
	g.Check(ctx)
	if d := box.last(t).Deadline("rep"); d != timing.Held(0) {
		t.Fatalf("rep may write until %s with c listed and silent, want the lease's end %s", d, timing.Held(0))
	}
	g.Promised(liveness.Promise{From: "c", Until: 8 * time.Second})
	g.Check(ctx)
	if d := box.last(t).Deadline("rep"); d != 7500*time.Millisecond {
		t.Fatalf("rep may write until %s once c promised too, want the earliest promise's end", d)
	}
}
