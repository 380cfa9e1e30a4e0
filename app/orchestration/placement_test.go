package orchestration_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// chanFeed is a StateFeed whose changes the test sends.
type chanFeed chan ports.StateChange

func (f chanFeed) Feed(context.Context) (<-chan ports.StateChange, error) { return f, nil }

// A change that makes the volume usable here (a release of the primary
// elsewhere) reaches every listener and places the node at once, not at
// the next period (an hour here); a change that moves nothing here places
// nothing.
func TestPlacementLabelsTheNodeAsSoonAsAChangeMakesAVolumeUsableHere(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctrl := gomock.NewController(t)
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "v"}}, nil).AnyTimes()
	states := fakecluster.New()
	active := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1, Ready: true, Active: true}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1, Ready: true}}}
	if _, err := states.Create(ctx, active); err != nil {
		t.Fatal(err)
	}
	placed := make(chan []volume.ID, 4)
	placer := mocks.NewMockNodePlacement(ctrl)
	placer.EXPECT().Place(gomock.Any(), replica.Node("b"), gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, _ replica.Node, usable, _ []volume.ID) error { placed <- usable; return nil }).AnyTimes()
	feed := make(chanFeed)
	var mu sync.Mutex
	var heard []ports.StateChange
	p := &orchestration.Placement{
		Labeler:   orchestration.NewLabeler("b", store, states, placer, zap.NewNop()),
		Feed:      feed,
		Listeners: []func(ports.StateChange){func(c ports.StateChange) { mu.Lock(); heard = append(heard, c); mu.Unlock() }},
		Period:    time.Hour,
		Log:       zap.NewNop(),
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	if got := <-placed; len(got) != 0 {
		t.Fatalf("first placement %v: the volume is written on a", got)
	}

	// Nothing moves here: heard, no placement.
	feed <- ports.StateChange{Volume: "v", State: active}
	// The primary released: usable on b, placed at once.
	released := active
	released.Replicas = []replica.Replica{active.Replicas[0], active.Replicas[1]}
	released.Replicas[0].Active = false
	if _, err := states.Update(ctx, "v", func(s *replica.State) error { *s = released; return nil }); err != nil {
		t.Fatal(err)
	}
	feed <- ports.StateChange{Volume: "v", State: released}
	select {
	case got := <-placed:
		if len(got) != 1 || got[0] != "v" {
			t.Fatalf("placed %v after the release, want [v]", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the release did not place the node before the period")
	}
	select {
	case got := <-placed:
		t.Fatalf("a change that moved nothing here placed the node (%v)", got)
	default:
	}
	mu.Lock()
	n := len(heard)
	mu.Unlock()
	if n != 2 {
		t.Fatalf("the listener heard %d changes, want 2", n)
	}
	cancel()
	close(feed)
	<-done
}
