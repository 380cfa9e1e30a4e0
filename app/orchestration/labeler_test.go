package orchestration_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// flakyState fails Get for one volume, as an API server timeout would.
type flakyState struct {
	ports.ClusterState
	fail volume.ID
}

func (f flakyState) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if id == f.fail {
		return replica.State{}, ports.ErrUnavailable
	}
	return f.ClusterState.Get(ctx, id)
}

func TestTheLabelerPlacesReadyCopiesOnlyAndLeavesUnreadableOnesAlone(t *testing.T) {
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
	// On node "a":
	mk("ready", &replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 4, SnapshotEpoch: 1, Ready: true}, {Node: "b", Snapshot: 4, SnapshotEpoch: 1, Ready: true}}})
	mk("written-elsewhere", &replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 4, SnapshotEpoch: 1, Ready: true}, {Node: "b", Snapshot: 4, SnapshotEpoch: 1, Ready: true, Active: true}}})
	mk("primary", &replica.State{ReplicationFactor: 1, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 4, SnapshotEpoch: 1, Active: true}}})
	mk("behind", &replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1}, {Node: "b", Snapshot: 9, SnapshotEpoch: 1, Ready: true, Active: true}}})
	mk("left", &replica.State{ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "b", Snapshot: 2, SnapshotEpoch: 1, Ready: true}}})
	mk("no-state", nil)
	mk("unreadable", &replica.State{ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "a", Ready: true}}})

	ctrl := gomock.NewController(t)
	placer := mocks.NewMockNodePlacement(ctrl)
	placer.EXPECT().Place(gomock.Any(), replica.Node("a"), []volume.ID{"primary", "ready"}, []volume.ID{"unreadable"}).Return(nil)
	l := orchestration.NewLabeler("a", store, flakyState{states, "unreadable"}, placer, zap.NewNop())
	usable, err := l.Sync(ctx)
	if err != nil || !slices.Equal(usable, []volume.ID{"primary", "ready"}) {
		t.Fatalf("Sync = %v, %v", usable, err)
	}

	// The placement's error is returned, for the caller's retry.
	placer.EXPECT().Place(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).Return(ports.ErrUnavailable)
	if _, err := l.Sync(ctx); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("Sync with a failing placement: %v", err)
	}
}

// Changed says when a state seen changing moves the volume's usability on
// this node away from the last placement, and only then.
func TestTheLabelerSaysWhenAStateChangesWhereTheVolumeIsUsable(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := mocks.NewMockSnapshotStore(ctrl)
	placer := mocks.NewMockNodePlacement(ctrl)
	states := fakecluster.New()
	active := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1, Ready: true, Active: true}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1, Ready: true}}}
	if _, err := states.Create(context.Background(), active); err != nil {
		t.Fatal(err)
	}
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil)
	placer.EXPECT().Place(gomock.Any(), replica.Node("b"), []volume.ID(nil), []volume.ID(nil)).Return(nil)
	l := orchestration.NewLabeler("b", store, states, placer, zap.NewNop())
	if _, err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Changed(active) {
		t.Fatal("a state that still keeps the volume off b was taken for a change")
	}
	released := active
	released.Replicas = []replica.Replica{active.Replicas[0], active.Replicas[1]}
	released.Replicas[0].Active = false
	if !l.Changed(released) {
		t.Fatal("a release that makes the volume usable on b was not seen")
	}
	other := released
	other.Volume = "w"
	other.Replicas = []replica.Replica{{Node: "a", Ready: true, Snapshot: 1, SnapshotEpoch: 1}}
	if l.Changed(other) {
		t.Fatal("a volume without a copy on b was taken for a change")
	}
}

// ChangedBy: a volume gone from the feed is usable nowhere, a change
// only where the last placement had it usable here.
func TestTheLabelerTakesAVolumeGoneForAChangeWhereItWasPlaced(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := mocks.NewMockSnapshotStore(ctrl)
	placer := mocks.NewMockNodePlacement(ctrl)
	states := fakecluster.New()
	active := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1, Ready: true, Active: true}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1, Ready: true}}}
	if _, err := states.Create(context.Background(), active); err != nil {
		t.Fatal(err)
	}
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil)
	placer.EXPECT().Place(gomock.Any(), replica.Node("a"), []volume.ID{"v"}, []volume.ID(nil)).Return(nil)
	l := orchestration.NewLabeler("a", store, states, placer, zap.NewNop())
	if _, err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.ChangedBy(ports.StateChange{Volume: "v", State: active}) {
		t.Fatal("the state placed was taken for a change")
	}
	if !l.ChangedBy(ports.StateChange{Volume: "v", Gone: true}) {
		t.Fatal("the volume placed here, gone, was not taken for a change")
	}
	if l.ChangedBy(ports.StateChange{Volume: "w", Gone: true}) {
		t.Fatal("a volume never placed here, gone, was taken for a change")
	}
}
