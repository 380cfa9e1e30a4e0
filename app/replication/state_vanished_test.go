package replication_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/faketransport"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// goneState: the ReplicatedVolume disappears (its finalizer removed by
// hand, as the policy allows any user but Ferry's, e.g. to unstick a
// deletion) while this replica is still listed.
type goneState struct {
	*fakecluster.Store
	gone  atomic.Bool
	after atomic.Int64 // >0: gone after that many more reads
}

func (g *goneState) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if n := g.after.Load(); n > 0 && g.after.Add(-1) == 0 {
		defer g.gone.Store(true)
	}
	if g.gone.Load() {
		return replica.State{}, fmt.Errorf("read: %w", ports.ErrNotFound)
	}
	return g.Store.Get(ctx, id)
}

func (g *goneState) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	if g.gone.Load() {
		return replica.State{}, fmt.Errorf("update: %w", ports.ErrNotFound)
	}
	return g.Store.Update(ctx, id, fn)
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !within(10*time.Second, cond) {
		t.Fatalf("timed out waiting until %s", what)
	}
}

// REVIEW: leaveDeleted answers "nothing to leave" when the state is gone,
// without destroying the copy; the machine counts itself left, Terminate
// reports the copy released, and the copy stays, listed nowhere (the
// adopter skips copies without a state).
func TestACopyOfADeletedVolumeSurvivesWhenItsStateVanishes(t *testing.T) {
	const id = volume.ID("pvc-g")
	fc := fakecluster.New()
	state := &goneState{Store: fc}
	store := memstore.New(t.TempDir(), 1<<30, 2)
	if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
		t.Fatal(err)
	}
	info, err := store.CreateSnapshot(ctx, id, "ferry-1-3", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateSnapshot(ctx, id, "csi-x", nil); err != nil { // a VolumeSnapshot of the former primary
		t.Fatal(err)
	}
	if _, err := fc.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: info.GUID, Ready: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := fc.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	evs := &events{}
	r := replication.New(replication.Config{Node: "b", Volume: id, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		store, state, faketransport.New(), evs, zap.NewNop())
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(runCtx); close(done) }()
	waitFor(t, "b observes Deleting and DiscardBlocked keeps its copy", func() bool {
		return slices.Contains(evs.reasons(), "DiscardBlocked")
	})
	// The VolumeSnapshot is deleted; the object goes (finalizer removed
	// by hand) between b's read of the state and leaveDeleted's re-read.
	state.after.Store(1)
	if err := store.DestroySnapshot(ctx, id, "csi-x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the state vanishes under b's next read", state.gone.Load)
	cancel()
	<-done
	err = r.Terminate(ctx) // the pod is garbage-collected with its owner
	_, gerr := store.GetVolume(ctx, id)
	if err == nil && !errors.Is(gerr, ports.ErrNotFound) {
		t.Fatalf("BUG: Terminate says the copy is released, but it is still there and nothing lists it (GetVolume: %v)", gerr)
	}
	t.Logf("Terminate: %v, GetVolume: %v", err, gerr)
}

// A ReplicatedVolume removed without Ferry's deletion mark (deleted by
// hand and its finalizer removed, or its CRD deleted by an uninstall; the
// replica pods are then garbage-collected with it) destroys no copy: a
// missing object is not a user's deletion. The copy stays, reported with
// its dataset, for the daemons to find again. (The orphan rule destroyed
// every copy this way: all the data.)
func TestACopyWhoseStateIsRemovedWithoutTheDeletionMarkIsKept(t *testing.T) {
	const id = volume.ID("pvc-h")
	fc := fakecluster.New()
	state := &goneState{Store: fc}
	store := memstore.New(t.TempDir(), 1<<30, 2)
	if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
		t.Fatal(err)
	}
	info, err := store.CreateSnapshot(ctx, id, "ferry-1-3", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fc.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: info.GUID, Active: true},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: info.GUID, Ready: true}}}); err != nil {
		t.Fatal(err)
	}
	evs := &events{}
	r := replication.New(replication.Config{Node: "b", Volume: id, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		store, state, faketransport.New(), evs, zap.NewNop())
	r.Step(ctx, replication.Requested) // b observes its state and its copy
	// The pod is garbage-collected with its ReplicatedVolume, removed by
	// hand (no mark): the leave reads it once more, then it is gone.
	state.after.Store(1)
	if err := r.Terminate(ctx); !errors.Is(err, replica.ErrUnsafe) {
		t.Fatalf("Terminate: %v, want the copy kept (ErrUnsafe)", err)
	}
	if _, err := store.GetVolume(ctx, id); err != nil {
		t.Fatalf("BUG: the copy of a volume nobody deleted was destroyed: %v", err)
	}
	if list, _ := store.ListSnapshots(ctx, id); len(list) != 1 {
		t.Fatalf("the copy's snapshots changed: %v", list)
	}
	if !slices.Contains(evs.reasons(), "CopyKept") {
		t.Fatalf("the kept copy was not reported; events %v", evs.reasons())
	}
}
