package failover

import (
	"context"
	"errors"
	"slices"
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

// Issue 21 (c): a publish just before the cut. The volume manager
// promoted a (epoch 4) and the publish acknowledged b before the pod
// mounted, but the guard's view never showed either (the watch lagged,
// then the link broke). Its fence must still cover the volume, from what
// it acknowledged itself: b may take over, so a without its lease and
// without b's promise stops writing.
func TestTheGuardFencesAPrimaryItsViewNeverShowedOnceItAcknowledgedATaker(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	cluster := fakecluster.New()
	st := primaryState("v", "b", "c") // b the primary of epoch 3, a its secondary
	st.Replicas[1].Node = "a"
	slices.SortFunc(st.Replicas, func(x, y replica.Replica) int { return compareNodes(x.Node, y.Node) })
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Update(ctx, "v", func(s *replica.State) error {
		if err := replica.Demote(s, "b", 3, replica.Snap{Number: 7, Epoch: 3}); err != nil {
			return err
		}
		return replica.Promote(s, "a")
	}); err != nil {
		t.Fatal(err)
	}
	vols := NewVolumes()
	vols.Saw(st) // the view: still epoch 3, b active
	takers := NewTakers("a", cluster, zap.NewNop())
	if err := takers.Acknowledge(ctx, "v"); err != nil { // the publish
		t.Fatal(err)
	}
	fresh, _ := cluster.Get(ctx, "v")
	if r, _ := fresh.Replica("b"); !r.Taker || fresh.Epoch != 4 {
		t.Fatalf("b not acknowledged in epoch 4: %+v", fresh)
	}
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	var asked []replica.Node
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, takers, store, mounts, fencer, nil, nopEvents{}, zap.NewNop(),
		WithPromises(askerFunc(func(node, _ replica.Node) (bool, time.Duration, error) {
			asked = append(asked, node)
			return false, 0, errors.New("unreachable")
		})))
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("apiserver away")).AnyTimes()
	clock.set(2 * time.Second)
	_ = g.RenewOnce(ctx)
	g.AskPromisesOnce(ctx)
	if !slices.Equal(asked, []replica.Node{"b"}) {
		t.Fatalf("asked %v for promises, want [b]: the taker it acknowledged, though its view shows b the primary", asked)
	}
	// The guard's first look at the volume: its view shows b the active
	// primary while a pod here mounts the copy read/write, but a fresh
	// read shows this node the primary (the view lags): no fence.
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{ID: "v", MountPath: "/p/v", MountSource: "pool/v"}, nil)
	mounts.EXPECT().MountsOf("pool/v").Return([]string{"/p/v", "/k/pods/x/mount"}, nil)
	mounts.EXPECT().MountAt("/k/pods/x/mount").Return(ports.Mount{Source: "pool/v"}, true, nil)
	g.Check(ctx) // the lease still runs: no fence (the mocks expect none)
	clock.set(4500 * time.Millisecond)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{ID: "v", MountPath: "/p/v", MountSource: "pool/v"}, nil)
	mounts.EXPECT().MountsOf("pool/v").Return([]string{"/p/v", "/k/pods/x/mount"}, nil)
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/v", "/k/pods/x/mount"}, "/p/v").Return(nil, nil)
	g.Check(ctx)
	if g.Fenced("v") == "" {
		t.Fatal("the primary here was not fenced: b, which it acknowledged, may take over")
	}
}

// Issue 21 (a) and (b): a copy that reported while the primary's guard
// could not see it (its first sync ended during a cut, or the replication
// factor was raised meanwhile) is not acknowledged, so the survivors
// never take the volume over through it, and the guard asks only the
// takers it acknowledged. Once the guard sees the copy and reaches the
// API server, it acknowledges it.
func TestACopyThePrimaryNeverAcknowledgedNeverTakesOver(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	cluster := fakecluster.New()
	st := primaryState("v", "a") // a single copy on a
	st.ReplicationFactor = 2
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	vols := NewVolumes()
	vols.Saw(st)
	// During the cut: c joins and reports; a's view is not told.
	if _, err := cluster.Update(ctx, "v", func(s *replica.State) error {
		replica.Join(s, "c")
		return replica.Report(s, "c", replica.Snap{Number: 7, Epoch: 3}, true)
	}); err != nil {
		t.Fatal(err)
	}
	// c's survivor takes a for lost after the lease: its takeover is
	// refused, nothing changes.
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "c": {Value: "1"}}}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	c := NewSurvivor(Config{Node: "c", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	for at := time.Duration(0); at <= 8*time.Second; at += 500 * time.Millisecond {
		clock.set(at)
		leases.renew("c", at.String())
		_ = c.Step(ctx) // no effect expected: the mocks fail on one
	}
	if got, _ := cluster.Get(ctx, "v"); got.Primary != "a" || got.Epoch != 3 {
		t.Fatalf("c took over although a never acknowledged it: %+v", got)
	}
	// The cut heals: the guard sees c and acknowledges it.
	fresh, _ := cluster.Get(ctx, "v")
	vols.Saw(fresh)
	takers := NewTakers("a", cluster, zap.NewNop())
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, mocks.NewMockNodeLease(ctrl), vols, takers,
		store, mocks.NewMockMountTable(ctrl), mocks.NewMockFencer(ctrl), nil, nopEvents{}, zap.NewNop())
	g.AcknowledgeOnce(ctx)
	if got, _ := cluster.Get(ctx, "v"); !slices.ContainsFunc(got.Replicas, func(r replica.Replica) bool { return r.Node == "c" && r.Taker }) {
		t.Fatalf("c not acknowledged once seen: %+v", got)
	}
	if got := takers.Of("v"); !slices.Equal(got, []replica.Node{"c"}) {
		t.Fatalf("the guard's takers %v, want [c]", got)
	}
}

func compareNodes(a, b replica.Node) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
