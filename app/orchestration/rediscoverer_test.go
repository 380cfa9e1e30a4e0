package orchestration_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

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

// directory is the cluster's nodes and volumes as a test sets them.
type directory struct {
	mu      sync.Mutex
	ferry   []replica.Node
	deleted map[replica.Node]bool
	volumes map[volume.ID]bool
	sizes   map[volume.ID]int64
	factors map[volume.ID]string
}

func (d *directory) FerryNodes(context.Context) ([]replica.Node, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.ferry), nil
}

func (d *directory) NodeExists(_ context.Context, n replica.Node) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.deleted[n], nil
}

func (d *directory) Volume(_ context.Context, id volume.ID) (ports.UserVolume, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return ports.UserVolume{CapacityBytes: d.sizes[id], ReplicationFactor: d.factors[id]}, d.volumes[id], nil
}

type heard struct {
	mu      sync.Mutex
	reasons []string
}

func (h *heard) Record(_ context.Context, _ volume.ID, ev ports.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasons = append(h.reasons, ev.Reason)
}

// copyWith makes id's copy in store holding the replication snapshots
// named, with meta.
func copyWith(t *testing.T, store *memstore.Store, id volume.ID, meta map[string]string, snaps ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB, Metadata: meta}); err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if _, err := store.CreateSnapshot(ctx, id, s, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// The state of a volume is lost while a holds 3@5 and b the newer 4@5
// (a secondary's copy: no recorded factor). a's daemon rebuilds it; it
// awaits b and c; b answers with its copy, c with none; only then may a
// copy be promoted, and only b's, the newest.
func TestALostStateIsRebuiltFromTheCopiesAndTheNewestBecomesPrimary(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	dir := &directory{ferry: []replica.Node{"a", "b", "c"}, volumes: map[volume.ID]bool{"pvc-r": true}}
	stores := map[replica.Node]*memstore.Store{"a": memstore.New(t.TempDir(), 1<<30, 1), "b": memstore.New(t.TempDir(), 1<<30, 2), "c": memstore.New(t.TempDir(), 1<<30, 3)}
	copyWith(t, stores["a"], "pvc-r", map[string]string{ports.MetaReplicationFactor: "2", ports.MetaPVC: "db/data"}, "ferry-5-2", "ferry-5-3")
	copyWith(t, stores["b"], "pvc-r", nil, "ferry-5-3", "ferry-5-4")
	ev := &heard{}
	rd := map[replica.Node]*orchestration.Rediscoverer{}
	for n, s := range stores {
		rd[n] = orchestration.NewRediscoverer(n, s, states, states, noMounts{}, dir, dir, ev, zap.NewNop())
	}
	if err := rd["a"].Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := states.Get(ctx, "pvc-r")
	if err != nil {
		t.Fatalf("a did not rebuild the state: %v", err)
	}
	if !slices.Equal(st.Awaiting, []replica.Node{"b", "c"}) || st.Primary != "" || st.ReplicationFactor != 2 || st.CapacityBytes != volume.MiB {
		t.Fatalf("rebuilt: %+v", st)
	}
	if !slices.Contains(ev.reasons, "Rediscovered") {
		t.Fatalf("the rebuild was not reported: %v", ev.reasons)
	}
	if err := replica.Promote(&st, "a"); !errors.Is(err, replica.ErrRediscovering) {
		t.Fatalf("a promoted while b and c are awaited: %v", err)
	}
	// b's and c's daemons see the rebuilt state in the feed and answer.
	for _, n := range []replica.Node{"b", "c"} {
		rd[n].Saw(ports.StateChange{Volume: "pvc-r", State: st})
		if err := rd[n].Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, _ = states.Get(ctx, "pvc-r")
	if len(st.Awaiting) != 0 || len(st.Replicas) != 2 {
		t.Fatalf("after the answers: %+v", st)
	}
	if b, _ := st.Replica("b"); b.Snapshot != 4 || b.SnapshotEpoch != 5 {
		t.Fatalf("b's answer: %+v", b)
	}
	if err := replica.Promote(&st, "a"); !errors.Is(err, replica.ErrBehind) {
		t.Fatalf("the older copy was promotable after the survey: %v", err)
	}
	if err := replica.Promote(&st, "b"); err != nil {
		t.Fatalf("the newest copy: %v", err)
	}
}

// A node deleted while awaited (an operator said it will not come back)
// is given up by the daemons that see the survey.
func TestADeletedNodeIsGivenUpByARebuiltState(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	dir := &directory{ferry: []replica.Node{"a", "gone"}, deleted: map[replica.Node]bool{}, volumes: map[volume.ID]bool{"pvc-g": true}}
	store := memstore.New(t.TempDir(), 1<<30, 1)
	copyWith(t, store, "pvc-g", map[string]string{ports.MetaReplicationFactor: "2"}, "ferry-1-7")
	a := orchestration.NewRediscoverer("a", store, states, states, noMounts{}, dir, dir, &heard{}, zap.NewNop())
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(ctx); err != nil { // the node still exists: awaited
		t.Fatal(err)
	}
	if st, _ := states.Get(ctx, "pvc-g"); !slices.Equal(st.Awaiting, []replica.Node{"gone"}) {
		t.Fatalf("awaiting %v, want the node that may come back", st.Awaiting)
	}
	dir.mu.Lock()
	dir.deleted["gone"] = true
	dir.mu.Unlock()
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := states.Get(ctx, "pvc-g"); len(st.Awaiting) != 0 {
		t.Fatalf("awaiting %v after the node's deletion", st.Awaiting)
	}
}

// Nothing is rebuilt for a copy of a volume that no longer exists (its
// node was away while it was deleted), a plain volume, or a copy that
// never held a replication snapshot; nothing is destroyed either.
func TestNothingIsRebuiltForADeletedVolumeAPlainOneOrOneNeverReplicated(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	dir := &directory{ferry: []replica.Node{"a"}, volumes: map[volume.ID]bool{"plain": true, "fresh": true}}
	store := memstore.New(t.TempDir(), 1<<30, 1)
	copyWith(t, store, "deleted", map[string]string{ports.MetaReplicationFactor: "2"}, "ferry-1-3")
	copyWith(t, store, "plain", map[string]string{ports.MetaReplicationFactor: "1"})
	copyWith(t, store, "fresh", map[string]string{ports.MetaReplicationFactor: "2"})
	a := orchestration.NewRediscoverer("a", store, states, states, noMounts{}, dir, dir, &heard{}, zap.NewNop())
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []volume.ID{"deleted", "plain", "fresh"} {
		if _, err := states.Get(ctx, id); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("%s: a state was made (%v)", id, err)
		}
		if _, err := store.GetVolume(ctx, id); err != nil {
			t.Errorf("%s: the copy is gone: %v", id, err)
		}
	}
}

// A listed copy's volume whose workload is gone (lost with a state that
// was rebuilt, or deleted by hand) gets it back from its sizer: with no
// primary, any listed copy's daemon; otherwise the primary's alone.
func TestAMissingWorkloadIsMadeAgainByItsSizer(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	for _, id := range []volume.ID{"rebuilt", "elsewhere"} {
		if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
			t.Fatal(err)
		}
	}
	rebuilt, err := replica.Rediscover("rebuilt", 2, "a", replica.Snap{Number: 3, Epoch: 1, GUID: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := states.Create(ctx, rebuilt); err != nil {
		t.Fatal(err)
	}
	if _, err := states.Create(ctx, replica.State{Volume: "elsewhere", ReplicationFactor: 2, Epoch: 1, Primary: "b",
		Replicas: []replica.Replica{{Node: "a", Snapshot: 1, SnapshotEpoch: 1}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1, Active: true}}}); err != nil {
		t.Fatal(err)
	}
	ctrl := gomock.NewController(t)
	w := mocks.NewMockReplicaWorkload(ctrl)
	w.EXPECT().Status(gomock.Any(), gomock.Any(), replica.Node("a")).Return(ports.WorkloadStatus{}, ports.ErrNotFound).Times(2)
	w.EXPECT().Apply(gomock.Any(), volume.ID("rebuilt"), placement.Remade(rebuilt), time.Duration(0)).Return(nil) // "elsewhere" is b's to size
	a := orchestration.NewAdopter("a", store, states, w, func(context.Context, volume.ID) error { return nil }, zap.NewNop())
	if _, err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
}

// Rebuilt by a secondary's copy (no recorded factor, a received copy's
// size), the state takes the volume's factor and size from its
// PersistentVolume: a factor of 2 would make a third copy surplus, and a
// received copy's size is none.
func TestARebuiltStateTakesTheVolumesFactorAndSize(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	dir := &directory{ferry: []replica.Node{"b"}, volumes: map[volume.ID]bool{"pvc-f": true},
		sizes: map[volume.ID]int64{"pvc-f": 3 * volume.MiB}, factors: map[volume.ID]string{"pvc-f": "3"}}
	store := memstore.New(t.TempDir(), 1<<30, 2)
	copyWith(t, store, "pvc-f", nil, "ferry-2-9")
	b := orchestration.NewRediscoverer("b", store, states, states, noMounts{}, dir, dir, &heard{}, zap.NewNop())
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := states.Get(ctx, "pvc-f")
	if err != nil || st.ReplicationFactor != 3 || st.CapacityBytes != 3*volume.MiB {
		t.Fatalf("rebuilt: %+v, %v; want factor 3 and 3 MiB, the volume's", st, err)
	}
}

// noMounts is a mount table where nothing but each dataset's own
// mountpoint is mounted; mountedBy adds pods' mounts of a source.
type noMounts struct{ mountedBy map[string][]string }

func (noMounts) MountAt(string) (ports.Mount, bool, error) { return ports.Mount{}, false, nil }

func (m noMounts) MountsOf(source string) ([]string, error) { return m.mountedBy[source], nil }

// A copy a pod still has mounted (its volume manager and watchdog went
// with the lost state: it may be the one writer, ahead of every snapshot)
// neither rebuilds the state nor answers its survey: nothing can be
// promoted elsewhere until the pod stops.
func TestACopyAPodStillWritesNeitherRebuildsNorAnswers(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	dir := &directory{ferry: []replica.Node{"a", "b"}, volumes: map[volume.ID]bool{"pvc-w": true}}
	sa, sb := memstore.New(t.TempDir(), 1<<30, 1), memstore.New(t.TempDir(), 1<<30, 2)
	copyWith(t, sa, "pvc-w", map[string]string{ports.MetaReplicationFactor: "2"}, "ferry-1-5")
	copyWith(t, sb, "pvc-w", nil, "ferry-1-4")
	info, _ := sa.GetVolume(ctx, "pvc-w")
	writing := noMounts{mountedBy: map[string][]string{info.MountSource: {"/var/lib/kubelet/pods/p/volumes/x/mount"}}}
	a := orchestration.NewRediscoverer("a", sa, states, states, writing, dir, dir, &heard{}, zap.NewNop())
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := states.Get(ctx, "pvc-w"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a copy being written rebuilt the state: %v", err)
	}
	// b rebuilds from its older copy; a does not answer while written.
	b := orchestration.NewRediscoverer("b", sb, states, states, noMounts{}, dir, dir, &heard{}, zap.NewNop())
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := states.Get(ctx, "pvc-w")
	a.Saw(ports.StateChange{Volume: "pvc-w", State: st})
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ = states.Get(ctx, "pvc-w"); !slices.Equal(st.Awaiting, []replica.Node{"a"}) {
		t.Fatalf("awaiting %v while a's pod writes, want a", st.Awaiting)
	}
	if err := replica.Promote(&st, "b"); !errors.Is(err, replica.ErrRediscovering) {
		t.Fatalf("b's older copy promotable while a is written: %v", err)
	}
}
