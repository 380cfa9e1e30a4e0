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
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// hookedCluster runs hook once, on the first Get after it is armed: what
// happens elsewhere while a survivor is between its read of the leases
// and its compare-and-swap.
type hookedCluster struct {
	*fakecluster.Store
	mu   sync.Mutex
	hook func()
}

func (c *hookedCluster) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	c.mu.Lock()
	h := c.hook
	c.hook = nil
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return c.Store.Get(ctx, id)
}

// Review 21 (change 6, the pods given back after a fence): a's renewals
// fail long enough for its guard to fence "rep" and for b's survivor to
// take a for lost. b reads the leases (a lost) and, before its takeover's
// compare-and-swap lands (a slow Step over many volumes, a GC or VM
// pause), a's renewal succeeds again: a's guard sees it may write, reads
// the state (still a's, epoch 3) and gives its pods back (EvictPods on a:
// they restart, are published anew and write). Then b's takeover lands on
// a verdict about a lease that has since been renewed: two writers (a's
// restarted pod and b's), and every write a's pod made after its give
// back, more than one snapshot interval, is given up.
//
// Nothing orders the give back after every survivor's last look at the
// old lease: the takeover's compare-and-swap does not check the lease,
// and the give back does not invalidate a takeover decided earlier.
func TestAGiveBackAfterARenewalRacesATakeoverDecidedOnTheOldLease(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	cluster := &hookedCluster{Store: fakecluster.New()}
	if _, err := cluster.Create(ctx, primaryState("rep", "a", "b")); err != nil {
		t.Fatal(err)
	}

	// a: the guard.
	aClock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	aStore := mocks.NewMockSnapshotStore(ctrl)
	aStore.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	aStore.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/k/pods/x/mount"}, nil).AnyTimes()
	mounts.EXPECT().MountAt(gomock.Any()).Return(ports.Mount{Source: ports.FencedMountSource, ReadOnly: true}, true, nil).AnyTimes()
	fencer := mocks.NewMockFencer(ctrl)
	fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).AnyTimes()
	aEff := newEffects(ctrl)
	givenBack := false
	aEff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).DoAndReturn(func(context.Context, replica.Node, volume.ID) ([]string, error) {
		givenBack = true // the pod restarts and writes the copy on a again
		return []string{"ns/app-0"}, nil
	}).AnyTimes()
	vols := NewVolumes()
	st, _ := cluster.Get(ctx, "rep")
	vols.Saw(st)
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, aClock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), aStore, mounts, fencer, aEff, nopEvents{}, zap.NewNop())

	// b: the survivor.
	bClock := &fakeClock{}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{}}
	bStore := mocks.NewMockSnapshotStore(ctrl)
	bStore.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rep"}}, nil).AnyTimes()
	bEff := newEffects(ctrl)
	bEff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	bEff.EXPECT().Unplace(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	bEff.EXPECT().Taint(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	bEff.EXPECT().EvictPods(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).AnyTimes()
	s := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, bClock.read, leases, cluster, nil, bStore, bEff, nopEvents{}, zap.NewNop())

	// a renews at 0 (value "1"), then its renewals fail.
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	leases.renew("a", "1")
	leases.renew("b", "1")
	for at := time.Duration(0); at < 5500*time.Millisecond; at += 500 * time.Millisecond {
		bClock.set(at)
		leases.renew("b", at.String())
		if err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("timeout"))
	aClock.set(4400 * time.Millisecond)
	_ = g.RenewOnce(ctx)
	aClock.set(4600 * time.Millisecond)
	g.Check(ctx)
	if g.Fenced("rep") == "" {
		t.Fatal("a not fenced without its lease")
	}

	// b's Step at 5.5 s takes a for lost; between its lease read and its
	// compare-and-swap, a's renewal goes through and its guard gives the
	// pods back.
	cluster.mu.Lock()
	cluster.hook = func() {
		aClock.set(5 * time.Second)
		lease.EXPECT().Renew(gomock.Any()).Return(nil)
		if err := g.RenewOnce(ctx); err != nil {
			t.Error(err)
		}
		leases.renew("a", "2") // the renewal is in the lease; b reads it next Step
		g.Check(ctx)
	}
	cluster.mu.Unlock()
	bClock.set(5500 * time.Millisecond)
	leases.renew("b", "5.5s")
	_ = s.Step(ctx)

	if !givenBack {
		t.Fatal("the test did not reach its point: a gave nothing back")
	}
	if now, _ := cluster.Get(ctx, "rep"); now.Primary != "a" {
		t.Fatalf("a gave its pods back (they write again on a, epoch 3), then b took the volume over on a lease verdict made before a renewed (now primary %s, epoch %d): two writers, and a's writes since the give back are given up", now.Primary, now.Epoch)
	}
}
