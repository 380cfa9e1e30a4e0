package orchestration_test

import (
	"context"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// A daemon of the deployment's current version rolls the replica pods of
// the volumes it rolls (it is their primary's), one pod per pass, the
// secondary before the primary's; a daemon of an earlier version (not the
// DaemonSet's image any more) rolls nothing, and neither does the daemon
// of a volume it does not roll.
func TestTheCurrentDaemonRollsTheReplicaPodsOfItsVolumesOneAtATime(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	for id, primary := range map[volume.ID]replica.Node{"mine": "b", "theirs": "c"} {
		copyWith(t, store, id, nil, "ferry-1-2")
		if _, err := states.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: primary, Replicas: []replica.Replica{
			{Node: "b", Snapshot: 2, SnapshotEpoch: 1, Active: primary == "b", Ready: true}, {Node: "c", Snapshot: 2, SnapshotEpoch: 1, Active: primary == "c", Ready: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl)
	w.EXPECT().Status(gomock.Any(), gomock.Any(), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1, Outside: 1, OnNode: true}, nil).AnyTimes()
	w.EXPECT().Apply(gomock.Any(), volume.ID("mine"), gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	r := mocks.NewMockReplicaRollout(ctrl)
	pods := []placement.RollPod{
		{Name: "pri", Node: "b", Primary: true, Ready: true},
		{Name: "sec", Node: "c", Ready: true},
	}
	gomock.InOrder(
		r.EXPECT().Current(gomock.Any()).Return(false, nil), // an earlier version: nothing
		r.EXPECT().Current(gomock.Any()).Return(true, nil),
		r.EXPECT().RolloutPods(gomock.Any(), volume.ID("mine")).Return(pods, nil),
		r.EXPECT().Renew(gomock.Any(), volume.ID("mine"), "sec").Return(nil),
		r.EXPECT().Current(gomock.Any()).Return(true, nil),
		// sec restarting: not ready yet, nothing renewed.
		r.EXPECT().RolloutPods(gomock.Any(), volume.ID("mine")).Return([]placement.RollPod{pods[0], {Name: "sec", Node: "c", Current: true}}, nil),
		r.EXPECT().Current(gomock.Any()).Return(true, nil),
		r.EXPECT().RolloutPods(gomock.Any(), volume.ID("mine")).Return([]placement.RollPod{pods[0], {Name: "sec", Node: "c", Current: true, Ready: true}}, nil),
		r.EXPECT().Renew(gomock.Any(), volume.ID("mine"), "pri").Return(nil),
	)
	a := orchestration.NewAdopter("b", store, states, w, leaveHere("b", store, states), zap.NewNop(), orchestration.WithRollout(r))
	for range 4 {
		if _, err := a.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
