package orchestration_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/app/replication"
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

	started, err := orchestration.NewAdopter("b", store, states, w, leaveHere("b", store, states), zap.NewNop()).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(started) != 2 || started[0] != "pri" || started[1] != "sec" {
		t.Fatalf("started %v, want [pri sec]", started)
	}
}

func leaveHere(node replica.Node, store ports.SnapshotStore, states ports.ClusterState) orchestration.LeaveFunc {
	return func(ctx context.Context, id volume.ID) error {
		return replication.LeaveHere(ctx, node, id, store, states, nopEvents{}, zap.NewNop())
	}
}

type nopEvents struct{}

func (nopEvents) Record(context.Context, volume.ID, ports.Event) {}

// A copy found without a pod leaves where it is, with no pod the
// ReplicaSet would delete at once: the copy of a volume being deleted, and
// a secondary's surplus copy the safe-deletion rule lets go (the
// ReplicaSet runs every secondary wanted, and two others hold its
// snapshot).
func TestTheAdopterDestroysCopiesThatNeedNoPodWithoutStartingOne(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	states := fakecluster.New()
	mk := func(id volume.ID, st replica.State) {
		if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
			t.Fatal(err)
		}
		snap, err := store.CreateSnapshot(ctx, id, "ferry-1-2", nil)
		if err != nil {
			t.Fatal(err)
		}
		st.Volume = id
		for i := range st.Replicas {
			if st.Replicas[i].Snapshot == 2 {
				st.Replicas[i].SnapshotGUID = snap.GUID
			}
		}
		if _, err := states.Create(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	mk("surplus", replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 2, SnapshotEpoch: 1, Active: true}, {Node: "b", Snapshot: 2, SnapshotEpoch: 1, Ready: true},
		{Node: "c", Snapshot: 2, SnapshotEpoch: 1, Ready: true}}})
	mk("deleted", replica.State{ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 2, SnapshotEpoch: 1, Active: true}, {Node: "b", Snapshot: 2, SnapshotEpoch: 1, Ready: true}}})
	if err := states.Delete(ctx, "deleted"); err != nil {
		t.Fatal(err)
	}
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl) // no Scale, no StartReplica
	w.EXPECT().Status(gomock.Any(), volume.ID("surplus"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1}, nil)
	w.EXPECT().Status(gomock.Any(), volume.ID("deleted"), replica.Node("b")).Return(ports.WorkloadStatus{}, nil)
	started, err := orchestration.NewAdopter("b", store, states, w, leaveHere("b", store, states), zap.NewNop()).Sync(ctx)
	if err != nil || len(started) != 0 {
		t.Fatalf("started %v, %v; want none", started, err)
	}
	for _, id := range []volume.ID{"surplus", "deleted"} {
		if _, err := store.GetVolume(ctx, id); err == nil {
			t.Errorf("b's copy of %s is still there", id)
		}
		if st, err := states.Get(ctx, id); err == nil {
			if _, listed := st.Replica("b"); listed {
				t.Errorf("b is still listed for %s", id)
			}
		}
	}
}

// recorded keeps the events raised, for assertions.
type recorded struct {
	mu  sync.Mutex
	got []ports.Event
}

func (r *recorded) Record(_ context.Context, _ volume.ID, ev ports.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ev)
}

func (r *recorded) withReason(reason string) []ports.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ports.Event
	for _, ev := range r.got {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// fencedCopyOn makes, on b's store, the copy of a primary fenced by a
// takeover: ferry-1-1 (where a took over), ferry-1-2 that nobody
// received, then writes never snapshotted. a took over in epoch 2 and c
// holds a's snapshot of epoch 2: b's copy is surplus (rf 2).
func fencedCopyOn(t *testing.T, store *memstore.Store, states *fakecluster.Store, id volume.ID) {
	t.Helper()
	ctx := context.Background()
	info, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB})
	if err != nil {
		t.Fatal(err)
	}
	write := func(data string) {
		if err := os.WriteFile(filepath.Join(info.MountPath, "data"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	if _, err := store.CreateSnapshot(ctx, id, "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	write("v2-fenced")
	s2, err := store.CreateSnapshot(ctx, id, "ferry-1-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	write("v3-never-snapshotted")
	if _, err := states.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 7003, Active: true, Ready: true},
		{Node: "b", Snapshot: 2, SnapshotEpoch: 1, SnapshotGUID: s2.GUID},
		{Node: "c", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 7003, Ready: true},
	}}); err != nil {
		t.Fatal(err)
	}
}

// A node back after a takeover finds its copy without a pod, surplus: the
// daemon's leave keeps the fenced term's snapshot and writes aside before
// it destroys the copy, and says so in a FencedWritesKept event.
func TestTheAdopterKeepsAFencedTermsWritesAsideBeforeDestroyingASurplusCopy(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	states := fakecluster.New()
	fencedCopyOn(t, store, states, "fenced")
	ev := &recorded{}
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl) // no Scale, no StartReplica
	w.EXPECT().Status(gomock.Any(), volume.ID("fenced"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1}, nil)
	leave := func(ctx context.Context, id volume.ID) error {
		return replication.LeaveHere(ctx, "b", id, store, states, ev, zap.NewNop())
	}
	started, err := orchestration.NewAdopter("b", store, states, w, leave, zap.NewNop()).Sync(ctx)
	if err != nil || len(started) != 0 {
		t.Fatalf("started %v, %v; want none", started, err)
	}
	if _, err := store.GetVolume(ctx, "fenced"); err == nil {
		t.Fatal("b's surplus copy is still there")
	}
	if st, _ := states.Get(ctx, "fenced"); len(st.Replicas) != 2 {
		t.Fatalf("b is still listed: %+v", st.Replicas)
	}
	kept := ev.withReason("FencedWritesKept")
	if len(kept) != 1 {
		t.Fatalf("FencedWritesKept events: %+v, want one", ev.got)
	}
	name := "kept/fenced-fenced-e2-ferry-1-2"
	if !strings.Contains(kept[0].Message, name) {
		t.Fatalf("FencedWritesKept says %q, want the copy %s", kept[0].Message, name)
	}
	if got := string(store.KeptFiles(name)["data"]); got != "v3-never-snapshotted" {
		t.Fatalf("the copy kept aside holds %q, want b's last write", got)
	}
}

// Without room to keep the fenced writes, the surplus copy is not
// destroyed: it stays listed, FencedWritesNotKept says why, and its
// volume manager is started (it keeps the copy as it is until space is
// freed, then keeps it aside and resyncs or leaves).
func TestTheAdopterDestroysNoSurplusCopyWhoseFencedWritesCannotBeKept(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(t.TempDir(), volume.MiB, 1) // the volume's reservation fills the pool
	states := fakecluster.New()
	fencedCopyOn(t, store, states, "fenced")
	ev := &recorded{}
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl)
	w.EXPECT().Status(gomock.Any(), volume.ID("fenced"), replica.Node("b")).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1}, nil)
	w.EXPECT().Scale(gomock.Any(), volume.ID("fenced"), 2).Return(nil)
	w.EXPECT().StartReplica(gomock.Any(), volume.ID("fenced"), replica.Node("b"), gomock.Any(), false).Return(nil)
	leave := func(ctx context.Context, id volume.ID) error {
		return replication.LeaveHere(ctx, "b", id, store, states, ev, zap.NewNop())
	}
	if _, err := orchestration.NewAdopter("b", store, states, w, leave, zap.NewNop()).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := store.GetVolume(ctx, "fenced")
	if err != nil {
		t.Fatalf("b's copy was destroyed although its fenced writes could not be kept: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(info.MountPath, "data")); string(data) != "v3-never-snapshotted" {
		t.Fatalf("b's copy holds %q, want its last write", data)
	}
	if st, _ := states.Get(ctx, "fenced"); len(st.Replicas) != 3 {
		t.Fatalf("b is no longer listed: %+v", st.Replicas)
	}
	if n := len(ev.withReason("FencedWritesNotKept")); n != 1 || len(ev.withReason("FencedWritesKept")) != 0 {
		t.Fatalf("events %+v: want one FencedWritesNotKept", ev.got)
	}
}
