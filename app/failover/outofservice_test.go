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

// Issue 21.10: a node an administrator declared shut down (the
// out-of-service taint) is taken over at once, without waiting for its
// lease, even while its lease still looks renewed and a promise runs.
func TestANodeDeclaredOutOfServiceIsTakenOverAtOnce(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	if _, err := cluster.Create(ctx, primaryState("v", "a", "b")); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "b": {Value: "1"}}}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	eff := mocks.NewMockFailoverEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	off := []replica.Node(nil)
	eff.EXPECT().OutOfService(gomock.Any()).DoAndReturn(func(context.Context) ([]replica.Node, error) { return off, nil }).AnyTimes()
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	if err := b.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _ := b.Promise("a"); !ok {
		t.Fatal("no promise to a live node")
	}
	clock.set(time.Second)
	leases.renew("a", "2")
	if err := b.Step(ctx); err != nil { // a renews and is promised: nothing happens
		t.Fatal(err)
	}
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "a" {
		t.Fatalf("taken over from a live node: %+v", st)
	}
	off = []replica.Node{"a"}
	gomock.InOrder(
		eff.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil),
		eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), true).Return(nil),
		eff.EXPECT().RemoveReplicaPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
		eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
	)
	clock.set(1500 * time.Millisecond)
	if err := b.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "b" || st.Epoch != 4 {
		t.Fatalf("a node declared out of service was not taken over at once: %+v", st)
	}
}

type nodeFencerFunc func(context.Context, replica.Node) error

func (f nodeFencerFunc) FenceNode(ctx context.Context, n replica.Node) error { return f(ctx, n) }

// Issue 21.10: where a node fence is configured, a lost node is fenced
// from outside before its volume is taken over; a fence that fails holds
// the takeover back (retried), and one that succeeds is not repeated.
func TestAConfiguredNodeFenceRunsBeforeTheTakeoverAndHoldsItBackWhenItFails(t *testing.T) {
	ctrl := gomock.NewController(t)
	cluster := fakecluster.New()
	ctx := context.Background()
	if _, err := cluster.Create(ctx, primaryState("v", "a", "b")); err != nil {
		t.Fatal(err)
	}
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "b": {Value: "1"}}}
	clock := &fakeClock{}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	eff.EXPECT().Tainted(gomock.Any(), gomock.Any()).Return(false, nil).AnyTimes()
	var fenced []replica.Node
	failing := true
	fence := nodeFencerFunc(func(_ context.Context, n replica.Node) error {
		fenced = append(fenced, n)
		if failing {
			return errors.New("no power switch answers")
		}
		return nil
	})
	b := NewSurvivor(Config{Node: "b", Lease: timing, Lag: 1, FenceNode: fence}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	step := func(at time.Duration) {
		clock.set(at)
		leases.renew("b", at.String())
		_ = b.Step(ctx)
	}
	for at := time.Duration(0); at <= 6*time.Second; at += 500 * time.Millisecond {
		step(at)
	}
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "a" || len(fenced) == 0 {
		t.Fatalf("taken over without the node fence, or it never ran (%v): %+v", fenced, st)
	}
	failing = false
	gomock.InOrder(
		eff.EXPECT().Unplace(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil),
		eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), true).Return(nil),
		eff.EXPECT().RemoveReplicaPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
		eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("v")).Return(nil, nil),
	)
	runs := len(fenced)
	step(6500 * time.Millisecond)
	step(7 * time.Second)
	if st, _ := cluster.Get(ctx, "v"); st.Primary != "b" || len(fenced) != runs+1 {
		t.Fatalf("after a fence that worked: fenced %v, state %+v", fenced, st)
	}
}
