package failover

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// recordWorld is a guard on a, primary of rep (taker b), whose copy is
// mounted by a pod here, with a permit box and fence records.
type recordWorld struct {
	g       *Guard
	clock   *fakeClock
	lease   *mocks.MockNodeLease
	eff     *mocks.MockFailoverEffects
	fencer  *mocks.MockFencer
	lock    *mocks.MockWriteLock
	box     *permitBox
	vols    *Volumes
	takers  *Takers
	cluster *fakecluster.Store
}

func newRecordWorld(t *testing.T, st replica.State) *recordWorld {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	w := &recordWorld{clock: &fakeClock{}, cluster: fakecluster.New(), box: &permitBox{}, vols: NewVolumes()}
	if _, err := w.cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	w.lease = mocks.NewMockNodeLease(ctrl)
	info := ports.VolumeInfo{ID: st.Volume, MountPath: "/p/rep", MountSource: "pool/rep", Metadata: map[string]string{ports.MetaReplicationFactor: "2"}}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{info}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), st.Volume).Return(info, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep"}, nil).AnyTimes() // the pods' mounts covered
	w.fencer = mocks.NewMockFencer(ctrl)
	w.eff = mocks.NewMockFailoverEffects(ctrl)
	w.vols.Saw(st)
	w.takers = NewTakers("a", w.cluster, zap.NewNop())
	w.lock = mocks.NewMockWriteLock(ctrl)
	w.g = NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, w.clock.read, w.lease, w.vols, w.takers, store,
		mounts, w.fencer, w.eff, nopEvents{}, zap.NewNop(), WithPermits(w.box, w.box, w.lock))
	return w
}

// The guard fences a volume itself (its lease ran out) that its watchdog
// fenced and recorded too (the daemon was down, say): the guard's own
// give-back lifts the watchdog's write lock (the node is still the
// primary), then restarts the pods, once, and takes the record with it;
// the record does not restart them a second time later.
func TestAWatchdogsRecordOfAVolumeTheGuardFencedGoesWithTheGuardsGiveBack(t *testing.T) {
	ctx := context.Background()
	// The lease ran out: the watchdog fenced and recorded, the guard fences.
	w := fencedWithRecord(t, "the deadline passed")
	if w.g.Fenced("rep") == "" {
		t.Fatal("the guard did not fence rep")
	}
	w.g.Check(ctx)
	// The lease is back: one restart, and the record is gone.
	w.clock.set(6 * time.Second)
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	gomock.InOrder(
		w.lock.EXPECT().UnlockWrites(gomock.Any(), volume.ID("rep")).Return(nil).Times(1),
		w.eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/app-0"}, nil).Times(1),
	)
	w.g.Check(ctx)
	w.g.Check(ctx)
	w.g.Check(ctx)
	if got, _ := w.box.Recorded(); len(got) != 0 {
		t.Fatalf("records left: %v", got)
	}
}

// The guard fences a volume itself that its watchdog recorded, and the
// volume is taken over while it is fenced: the guard's fence of the ended
// term is given back by nothing, but the record goes all the same (with
// a give-back of its pods, as every record's: see
// TestAWatchdogsRecordIsGivenBackWhoeverThePrimaryIs).
func TestAWatchdogsRecordOfAVolumeTheGuardFencedAndWasTakenOverGoes(t *testing.T) {
	ctx := context.Background()
	st := primaryState("rep", "a", "b")
	w := newRecordWorld(t, st)
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	w.g.Check(ctx)
	_ = w.box.Record("rep", "the deadline passed")
	w.clock.set(5 * time.Second)
	w.lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = w.g.RenewOnce(ctx)
	w.fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1)
	w.g.Check(ctx)
	// b takes over.
	over, err := w.cluster.Update(ctx, "rep", func(s *replica.State) error { return replica.Takeover(s, "b", "a", 1) })
	if err != nil {
		t.Fatal(err)
	}
	w.vols.Saw(over)
	w.clock.set(20 * time.Second)
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	gomock.InOrder(
		// The watchdog's fence finished (its stopped holders killed)
		// before the pods restart.
		w.fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1),
		w.eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return(nil, nil).Times(1),
	)
	for range 3 {
		w.g.Check(ctx) // once: a second EvictPods fails the mock, an UnlockWrites too (b is the primary: a's copy stays locked)
	}
	if got, _ := w.box.Recorded(); len(got) != 0 {
		t.Fatalf("records left: %v", got)
	}
}

// A read/write publish while a watchdog's fence is recorded and not yet
// given back (the daemon back, its lease held, its guard's give-back not
// run yet) is refused: it would lift the lock under processes the
// watchdog stopped and that the give-back kills, and mount a pod the
// give-back then restarts. Once given back, the claim goes through.
func TestAClaimWaitsForTheGiveBackOfAWatchdogsFence(t *testing.T) {
	ctx := context.Background()
	w := newRecordWorld(t, primaryState("rep", "a", "b"))
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil).AnyTimes()
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	_ = w.box.Record("rep", "the deadline passed")
	err := w.takers.Claim(ctx, "rep")
	if err == nil || !strings.Contains(err.Error(), "watchdog") {
		t.Fatalf("claimed a volume whose watchdog's fence is not given back: %v", err)
	}
	gomock.InOrder(
		w.fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1),
		w.lock.EXPECT().UnlockWrites(gomock.Any(), volume.ID("rep")).Return(nil).Times(1),
		w.eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return(nil, nil).Times(1),
	)
	w.g.Check(ctx)
	if got, _ := w.box.Recorded(); len(got) != 0 {
		t.Fatalf("records left after the give-back: %v", got)
	}
	if err := w.takers.Claim(ctx, "rep"); err != nil {
		t.Fatalf("the claim after the give-back: %v", err)
	}
}

// A watchdog writes its spell's record once more after the guard's
// give-back cleared it (its first write raced the guard's read): the same
// record restarts nothing a second time (a second give-back deleted the
// pod its controller had just started again), and it is cleared.
func TestTheSameRecordReadAgainAfterItsGiveBackRestartsNothing(t *testing.T) {
	ctx := context.Background()
	w := fencedWithRecord(t, "the deadline passed [spell at 5s]")
	w.clock.set(6 * time.Second)
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	w.lock.EXPECT().UnlockWrites(gomock.Any(), volume.ID("rep")).Return(nil).Times(1)
	w.eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/app-0"}, nil).Times(1)
	w.g.Check(ctx)
	// The spell's record, written again.
	_ = w.box.Record("rep", "the deadline passed [spell at 5s]")
	w.g.Check(ctx)
	w.g.Check(ctx)
	if got, _ := w.box.Recorded(); len(got) != 0 {
		t.Fatalf("records left: %v", got)
	}
}

// fencedWithRecord is a guard of node a, primary of rep, whose lease ran
// out at 5 s: the watchdog recorded record, and the guard fenced rep.
func fencedWithRecord(t *testing.T, record string) *recordWorld {
	t.Helper()
	ctx := context.Background()
	w := newRecordWorld(t, primaryState("rep", "a", "b"))
	w.lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := w.g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	w.g.Check(ctx)
	_ = w.box.Record("rep", record)
	w.clock.set(5 * time.Second)
	w.lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = w.g.RenewOnce(ctx)
	w.fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1)
	w.g.Check(ctx)
	return w
}
