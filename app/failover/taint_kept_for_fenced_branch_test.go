package failover

import (
	"context"
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

// Review: a, back after b took its volume over (epoch 4), reports its
// diverged final snapshot 8@3 as ready (its machine holds the "newest",
// domain/replica's failover_old_primary_returns_mid_takeover.txt: "a:
// report 3@2:102 ready=true") before b's first snapshot makes it roll
// back. Its fenced taint must stay until it resynced; before the fix the
// stored ready flag lifted it at once.
func TestTheOwnTaintStaysWhileTheCopyHereHoldsWhatThePrimaryLacks(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	cluster := fakecluster.New()
	st := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 4, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 8, SnapshotEpoch: 3, Ready: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 3, Ready: true, Active: true},
	}}
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("")).Return([]ports.SnapshotInfo{{Volume: "v", Name: "ferry-3-8", GUID: 308}}, nil).AnyTimes()
	eff := newEffects(ctrl)
	checked := 0
	eff.EXPECT().Tainted(gomock.Any(), replica.Node("a")).DoAndReturn(func(context.Context, replica.Node) (bool, error) {
		checked++
		return true, nil
	}).AnyTimes()
	// No Taint(a, false): gomock fails the test on one.
	leases := &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "1"}, "b": {Value: "1"}}}
	clock := &fakeClock{}
	a := NewSurvivor(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, leases, cluster, nil, store, eff, nopEvents{}, zap.NewNop())
	// a renews its lease (the taint is only checked then) for 20 s, and b.
	for at := time.Duration(0); at <= 20*time.Second; at += time.Second {
		clock.set(at)
		leases.renew("a", at.String())
		leases.renew("b", at.String())
		if err := a.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if checked < 3 {
		t.Fatalf("the taint was checked %d times in 20 s", checked)
	}
}
