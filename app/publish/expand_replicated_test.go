package publish_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// An expansion of a replicated volume on its primary's node is recorded
// where every copy reads it before this copy grows: each copy grows to it
// (replica.Grow), so a move or a failover after an expansion finds the
// grown size. A size that cannot be recorded grows nothing (retried).
func TestAnExpansionOfAReplicatedVolumeIsRecordedForEveryCopyFirst(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := mocks.NewMockSnapshotStore(ctrl)
	states := fakecluster.New()
	if _, err := states.Create(ctx, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: cfg.Node, CapacityBytes: volume.GiB,
		Replicas: []replica.Replica{{Node: cfg.Node, Active: true}, {Node: "node-2"}}}); err != nil {
		t.Fatal(err)
	}
	var sizes ports.CapacityRecorder = states
	n := publish.New(cfg, store, mocks.NewMockMounter(ctrl), zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: states,
		Control: mocks.NewMockReplicaControl(ctrl), Workload: mocks.NewMockReplicaWorkload(ctrl), Events: &events{}, Wait: time.Second, Sizes: sizes}))
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	store.EXPECT().Resize(gomock.Any(), volume.ID("v"), 3*volume.GiB).DoAndReturn(func(any, volume.ID, int64) error {
		if st, _ := states.Get(ctx, "v"); st.CapacityBytes != 3*volume.GiB {
			t.Errorf("the copy grew before the size was recorded for every copy (state: %d)", st.CapacityBytes)
		}
		return nil
	})
	got, err := n.Expand(ctx, "v", vol.MountPath, &volume.CapacityRange{RequiredBytes: 3 * volume.GiB})
	if err != nil || got != 3*volume.GiB {
		t.Fatalf("Expand = %d, %v", got, err)
	}
	if st, _ := states.Get(ctx, "v"); st.CapacityBytes != 3*volume.GiB {
		t.Fatalf("the state records %d bytes, want the expansion's %d", st.CapacityBytes, 3*volume.GiB)
	}
}

// refusedSizes cannot record any size.
type refusedSizes struct{}

func (refusedSizes) RecordCapacity(context.Context, volume.ID, int64) error {
	return fmt.Errorf("api server away: %w", ports.ErrUnavailable)
}

func TestAnExpansionWhoseSizeCannotBeRecordedGrowsNothing(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := mocks.NewMockSnapshotStore(ctrl) // any Resize fails the test
	n := publish.New(cfg, store, mocks.NewMockMounter(ctrl), zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: fakecluster.New(),
		Control: mocks.NewMockReplicaControl(ctrl), Workload: mocks.NewMockReplicaWorkload(ctrl), Events: &events{}, Wait: time.Second, Sizes: refusedSizes{}}))
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	if _, err := n.Expand(ctx, "v", vol.MountPath, &volume.CapacityRange{RequiredBytes: 3 * volume.GiB}); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Expand: %v, want the recording's failure (retried)", err)
	}
}
