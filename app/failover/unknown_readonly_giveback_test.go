package failover

import (
	"context"
	"errors"
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

// Review 21 (change 6 with the unknown-copy fence): a's daemon restarts
// while cut off; its view is empty, so checkUnknown fences every
// replicated copy here, a secondary with a read-only pod among them (b is
// the volume's primary). The link comes back: the lease renews, the view
// learns the state, and the guard "gives back" the copy, but giveBackPods
// only restarts pods where this node is the active primary: the read-only
// pod here stays on the fence's empty placeholder until someone restarts
// it by hand (no event says so either). Stuck, not data loss.
func TestAReadOnlyPodFencedAsUnknownIsGivenBackToo(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	cluster := fakecluster.New()
	st0 := primaryState("rep", "b", "a")
	st0.Replicas[0], st0.Replicas[1] = st0.Replicas[1], st0.Replicas[0] // sorted by node
	if _, err := cluster.Create(ctx, st0); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	rep := ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep", Metadata: map[string]string{ports.MetaReplicationFactor: "2"}}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{rep}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(rep, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/k/pods/ro/mount"}, nil).AnyTimes()
	mounts.EXPECT().MountAt("/k/pods/ro/mount").Return(ports.Mount{Source: "pool/rep", ReadOnly: true}, true, nil).AnyTimes()
	fencer := mocks.NewMockFencer(ctrl)
	fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1)
	eff := newEffects(ctrl)
	restarted := false
	eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).DoAndReturn(func(context.Context, replica.Node, volume.ID) ([]string, error) {
		restarted = true
		return []string{"ns/reader"}, nil
	}).AnyTimes()
	vols := NewVolumes()
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, eff, nopEvents{}, zap.NewNop())

	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	clock.set(time.Second)
	g.Check(ctx)
	if g.Fenced("rep") == "" {
		t.Fatal("the unknown copy was not fenced")
	}
	// Back: the lease renews and the view learns the state.
	clock.set(2 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := cluster.Get(ctx, "rep")
	vols.Saw(st)
	for range 3 {
		g.Check(ctx)
	}
	if !restarted {
		t.Fatal("the read-only pod fenced as an unknown copy's was never restarted: it sits on an empty read-only placeholder for good")
	}
}
