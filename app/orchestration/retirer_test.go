package orchestration_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// podsOn is a workload whose only answer is which nodes run a pod of
// each volume.
type podsOn struct {
	mu sync.Mutex
	on map[volume.ID][]replica.Node
	ports.ReplicaWorkload
}

func (p *podsOn) Status(_ context.Context, id volume.ID, node replica.Node) (ports.WorkloadStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nodes, ok := p.on[id]
	if !ok {
		return ports.WorkloadStatus{}, ports.ErrNotFound
	}
	return ports.WorkloadStatus{OnNode: slices.Contains(nodes, node)}, nil
}

// a, the primary of epoch 4, released the volume holding the newest copy
// (9@4); b and c hold 7@4 and run their volume managers.
func releasedOnA(t *testing.T, states *fakecluster.Store) replica.State {
	t.Helper()
	st, err := states.Create(context.Background(), replica.State{Volume: "pvc-r", ReplicationFactor: 2, Epoch: 4, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 4, SnapshotGUID: 90, Ready: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 70, Taker: true},
		{Node: "c", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 70, Taker: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func retirerOn(t *testing.T, node replica.Node, states *fakecluster.Store, dir *directory, w *podsOn, ev *heard, copies ...volume.ID) *orchestration.Retirer {
	t.Helper()
	store := memstore.New(t.TempDir(), 1<<30, 1)
	for _, id := range copies {
		copyWith(t, store, id, nil, "ferry-4-7")
	}
	return orchestration.NewRetirer(node, store, states, dir, w, ev, zap.NewNop())
}

// a's Node is deleted: b's and c's daemons retire its entry, once; the
// volume is left with no primary, and b may then be promoted (before,
// a's newer copy held every promotion back).
func TestADeletedNodesCopyIsRetiredByTheDaemonsListedWithIt(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	st := releasedOnA(t, states)
	dir := &directory{deleted: map[replica.Node]bool{}}
	w := &podsOn{on: map[volume.ID][]replica.Node{"pvc-r": {"b", "c"}}}
	ev := &heard{}
	b := retirerOn(t, "b", states, dir, w, ev, "pvc-r")
	c := retirerOn(t, "c", states, dir, w, ev, "pvc-r")
	for _, r := range []*orchestration.Retirer{b, c} {
		r.Saw(ports.StateChange{Volume: "pvc-r", State: st})
		if err := r.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := states.Get(ctx, "pvc-r"); len(got.Replicas) != 3 || len(ev.reasons) != 0 {
		t.Fatalf("a node that exists was retired: %+v, events %v", got, ev.reasons)
	}
	dir.deleted["a"] = true
	for _, r := range []*orchestration.Retirer{b, c} {
		if err := r.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := states.Get(ctx, "pvc-r")
	if _, listed := got.Replica("a"); listed || got.Primary != "" || len(got.Replicas) != 2 {
		t.Fatalf("after a's node was deleted: %+v", got)
	}
	if !slices.Equal(ev.reasons, []string{"CopyRetired"}) {
		t.Fatalf("events %v, want one CopyRetired (the second daemon finds nothing left)", ev.reasons)
	}
	if err := replica.Promote(&got, "b"); err != nil {
		t.Fatalf("b cannot be promoted once a is retired: %v", err)
	}
}

// The active primary's node deleted: its entry stays (its pod may still
// write the only current copy); a takeover ends its term first.
func TestADeletedNodesActivePrimaryStaysListed(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	releasedOnA(t, states)
	st, err := states.Update(ctx, "pvc-r", func(s *replica.State) error { s.Replicas[0].Active = true; return nil })
	if err != nil {
		t.Fatal(err)
	}
	dir := &directory{deleted: map[replica.Node]bool{"a": true}}
	ev := &heard{}
	b := retirerOn(t, "b", states, dir, &podsOn{on: map[volume.ID][]replica.Node{"pvc-r": {"b", "c"}}}, ev, "pvc-r")
	b.Saw(ports.StateChange{Volume: "pvc-r", State: st})
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := states.Get(ctx, "pvc-r"); len(got.Replicas) != 3 || !got.Replicas[0].Active || len(ev.reasons) != 0 {
		t.Fatalf("the active primary of a deleted node was retired: %+v, events %v", got, ev.reasons)
	}
}

// c comes back with a new, empty pool: its daemon retires its own entry,
// but only while no volume manager of the volume runs on c (a new
// replica's joins before its first receive makes the copy), and never
// for a volume the feed has not shown it listed in.
func TestANodeBackWithAnEmptyPoolRetiresItsOwnEntry(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	st := releasedOnA(t, states)
	dir := &directory{deleted: map[replica.Node]bool{}}
	w := &podsOn{on: map[volume.ID][]replica.Node{"pvc-r": {"b", "c"}}}
	ev := &heard{}
	c := retirerOn(t, "c", states, dir, w, ev) // no copy
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := states.Get(ctx, "pvc-r"); len(got.Replicas) != 3 {
		t.Fatalf("retired before the feed showed the volume: %+v", got)
	}
	c.Saw(ports.StateChange{Volume: "pvc-r", State: st})
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := states.Get(ctx, "pvc-r"); len(got.Replicas) != 3 {
		t.Fatalf("retired while its volume manager runs on c: %+v", got)
	}
	w.on["pvc-r"] = []replica.Node{"b"}
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := states.Get(ctx, "pvc-r")
	if _, listed := got.Replica("c"); listed || len(got.Replicas) != 2 || !slices.Equal(ev.reasons, []string{"CopyRetired"}) {
		t.Fatalf("c's empty pool: %+v, events %v", got, ev.reasons)
	}
	// b holds its copy: its entry stays whatever runs.
	b := retirerOn(t, "b", states, dir, &podsOn{on: map[volume.ID][]replica.Node{}}, ev, "pvc-r")
	b.Saw(ports.StateChange{Volume: "pvc-r", State: got})
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := states.Get(ctx, "pvc-r"); len(got.Replicas) != 2 {
		t.Fatalf("b's copy retired: %+v", got)
	}
}
