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

func TestTheAdopterRestartsListedCopiesRaisingTheWorkloadFirst(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	states := fakecluster.New()
	mk := func(id volume.ID, st *replica.State) {
		if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
			t.Fatal(err)
		}
		if st != nil {
			st.Volume = id
			if _, err := states.Create(ctx, *st); err != nil {
				t.Fatal(err)
			}
		}
	}
	// On node "b": a secondary whose pod is gone, while the ReplicaSet's
	// one pod runs elsewhere (c, catching up).
	secondary := replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 4, SnapshotEpoch: 1, Active: true}, {Node: "b", Snapshot: 4, SnapshotEpoch: 1, Ready: true}, {Node: "c"}}}
	mk("sec", &secondary)
	// b is the active primary of this one; its pod is gone.
	primary := replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "b", Replicas: []replica.Replica{
		{Node: "b", Snapshot: 2, SnapshotEpoch: 1, Active: true}, {Node: "c", Snapshot: 2, SnapshotEpoch: 1, Ready: true}}}
	mk("pri", &primary)
	// Running fine: only sized (b is its primary).
	running := primary
	mk("run", &running)
	// Left the volume: not listed, never started.
	mk("left", &replica.State{ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "a", Snapshot: 1, SnapshotEpoch: 1}}})
	// Not replicated.
	mk("plain", nil)

	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl)
	w.EXPECT().Status(gomock.Any(), volume.ID("sec"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1}, nil)
	gomock.InOrder(
		w.EXPECT().Scale(gomock.Any(), volume.ID("sec"), 2).Return(nil),
		w.EXPECT().StartReplica(gomock.Any(), volume.ID("sec"), replica.Node("b"), gomock.Any(), false).Return(nil),
	)
	w.EXPECT().Status(gomock.Any(), volume.ID("pri"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1}, nil)
	w.EXPECT().Apply(gomock.Any(), volume.ID("pri"), placement.Desired(primary), gomock.Any()).Return(nil)
	w.EXPECT().StartReplica(gomock.Any(), volume.ID("pri"), replica.Node("b"), gomock.Any(), true).Return(nil)
	w.EXPECT().Status(gomock.Any(), volume.ID("run"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1, OnNode: true}, nil)
	w.EXPECT().Apply(gomock.Any(), volume.ID("run"), gomock.Any(), gomock.Any()).Return(nil)

	started, err := orchestration.NewAdopter("b", store, states, w, zap.NewNop()).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != 2 || started[0] != "pri" || started[1] != "sec" {
		t.Fatalf("started %v, want [pri sec]", started)
	}
}
