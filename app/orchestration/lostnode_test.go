package orchestration_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/failover"
	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// rsWorld is one volume's replica pods as Kubernetes keeps them, for the
// adopters and the survivor: a ReplicaSet (its pods, its replicas) and the
// pods outside it, with the ReplicaSet controller's reconciling after every
// change. The controller deletes a surplus pod newest first, which is its
// choice between pods equally unready: a new replica pod and a pod on a
// node the controller still sees Ready, or on one whose pods the node
// controller marked unready (k8s.io/kubernetes pkg/controller
// ActivePodsWithRanks: the node's state is no criterion). It places a
// missing pod on a node of schedulable without a pod of the volume
// (anti-affinity), and calls placed for it (the new copy's volume manager
// joining the volume). Pods on a lost node stay until deleted, as the API
// server keeps a pod whose kubelet cannot confirm anything.
type rsWorld struct {
	mu          sync.Mutex
	replicas    int
	pods        []rsPod
	seq         int
	schedulable []replica.Node
	placed      func(replica.Node)
	// deleted counts, per node, the pods the ReplicaSet controller deleted
	// to scale down.
	deleted map[replica.Node]int
	// removed are the pods the survivor force-deleted.
	removed []string
}

type rsPod struct {
	name    string
	node    replica.Node
	outside bool
	seq     int
}

func newRSWorld(replicas int, schedulable ...replica.Node) *rsWorld {
	return &rsWorld{replicas: replicas, schedulable: schedulable, deleted: map[replica.Node]int{}, placed: func(replica.Node) {}}
}

// add makes a pod on node, inside the ReplicaSet or outside it.
func (w *rsWorld) add(node replica.Node, outside bool) {
	w.seq++
	w.pods = append(w.pods, rsPod{name: fmt.Sprintf("%s-%d", node, w.seq), node: node, outside: outside, seq: w.seq})
}

func (w *rsWorld) onNode(node replica.Node) int {
	return slices.IndexFunc(w.pods, func(p rsPod) bool { return p.node == node })
}

// reconcile is the ReplicaSet controller's sync.
func (w *rsWorld) reconcile() {
	for {
		var in []int
		for i, p := range w.pods {
			if !p.outside {
				in = append(in, i)
			}
		}
		switch {
		case len(in) > w.replicas:
			newest := slices.MaxFunc(in, func(a, b int) int { return w.pods[a].seq - w.pods[b].seq })
			w.deleted[w.pods[newest].node]++
			w.pods = slices.Delete(w.pods, newest, newest+1)
		case len(in) < w.replicas:
			i := slices.IndexFunc(w.schedulable, func(n replica.Node) bool { return w.onNode(n) < 0 })
			if i < 0 {
				return // Pending: no node for it
			}
			w.add(w.schedulable[i], false)
			w.placed(w.schedulable[i])
		default:
			return
		}
	}
}

func (w *rsWorld) Apply(_ context.Context, _ volume.ID, o placement.Objects, _ time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replicas = o.Secondaries
	w.reconcile()
	return nil
}

func (w *rsWorld) StartReplica(_ context.Context, _ volume.ID, node replica.Node, _ time.Duration, primary bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.onNode(node) < 0 {
		w.add(node, primary)
		w.reconcile() // the ReplicaSet adopts it, and deletes its surplus
	}
	return nil
}

func (w *rsWorld) Status(_ context.Context, _ volume.ID, node replica.Node) (ports.WorkloadStatus, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := ports.WorkloadStatus{Secondaries: w.replicas}
	for _, p := range w.pods {
		st.OnNode = st.OnNode || p.node == node
		if p.outside {
			st.Outside++
			st.OutsideOnNode = st.OutsideOnNode || p.node == node
		} else {
			st.Running++
		}
	}
	return st, nil
}

func (w *rsWorld) Scale(_ context.Context, _ volume.ID, n int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.replicas = n
	w.reconcile()
	return nil
}

func (w *rsWorld) Segment(volume.ID) (string, string) { return "replica.ferry.zfs.csi.io/v", "ready" }

func (w *rsWorld) SetOutside(_ context.Context, _ volume.ID, node replica.Node, outside bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := w.onNode(node)
	if i < 0 {
		return ports.ErrNotFound
	}
	w.pods[i].outside = outside
	w.reconcile()
	return nil
}

// The survivor's effects on the lost node: only the replica pods matter
// here (the pods using the volume are the workload's, not modelled).
func (w *rsWorld) Unplace(context.Context, replica.Node, volume.ID) error { return nil }
func (w *rsWorld) Taint(context.Context, replica.Node, bool) error        { return nil }
func (w *rsWorld) Tainted(context.Context, replica.Node) (bool, error)    { return false, nil }
func (w *rsWorld) OutOfService(context.Context) ([]replica.Node, error)   { return nil, nil }
func (w *rsWorld) EvictPods(context.Context, replica.Node, volume.ID) ([]string, error) {
	return nil, nil
}

func (w *rsWorld) RemoveReplicaPods(_ context.Context, node replica.Node, _ volume.ID) ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for i := w.onNode(node); i >= 0; i = w.onNode(node) {
		out = append(out, w.pods[i].name)
		w.pods = slices.Delete(w.pods, i, i+1)
	}
	w.removed = append(w.removed, out...)
	w.reconcile() // the ReplicaSet replaces its own
	return out, nil
}

var (
	_ ports.ReplicaWorkload = (*rsWorld)(nil)
	_ ports.FailoverEffects = (*rsWorld)(nil)
)

type leaseMap map[replica.Node]ports.LeaseRecord

func (l leaseMap) Leases(context.Context) (map[replica.Node]ports.LeaseRecord, error) {
	return maps.Clone(l), nil
}

// The churn seen on a three-node cluster after its primary's node was
// killed. a, the primary (its volume manager outside the ReplicaSet), is
// lost; c, the ReplicaSet's one secondary, takes over; the writer's pod
// comes to c and its publish moves c's replica pod out of the ReplicaSet,
// which, left with no pod, starts one on b: a new copy joins and receives
// the new epoch's first snapshot. Kubernetes keeps a's pod (its kubelet
// cannot confirm a deletion). While it counts as a pod outside the
// ReplicaSet, c's sizer wants no secondary (the factor, 2, less the two
// pods outside) and b's adopter one (the factor less the active primary):
// b's pod is started and deleted at every placement period, its copy never
// settling. Once the survivor's takeover removed a's replica pods (before
// the writer's pod is deleted and comes to c), both agree: b's pod runs on,
// never deleted. And when a returns, its copy, without a pod and surplus,
// leaves (its fenced term's writes kept aside) instead of fighting b for
// the ReplicaSet's one place.
func TestAPodOnALostNodeDoesNotMakeTheSizerDeleteTheCopyALiveNodeRuns(t *testing.T) {
	ctx := context.Background()
	states := fakecluster.New()
	const id = volume.ID("v")
	// a's copy: snapshots 1 and 2 of epoch 1 (c received 1 only: 2 is on
	// the branch the takeover leaves), and writes never snapshotted.
	storeA := memstore.New(t.TempDir(), 1<<30, 1)
	if _, err := storeA.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
		t.Fatal(err)
	}
	s1, err := storeA.CreateSnapshot(ctx, id, "ferry-1-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := storeA.CreateSnapshot(ctx, id, "ferry-1-2", nil)
	if err != nil {
		t.Fatal(err)
	}
	storeB := memstore.New(t.TempDir(), 1<<30, 1)
	storeC := memstore.New(t.TempDir(), 1<<30, 1)
	if _, err := storeC.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
		t.Fatal(err)
	}
	if _, err := states.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 2, SnapshotEpoch: 1, SnapshotGUID: s2.GUID, Active: true, Ready: true},
		{Node: "c", Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: s1.GUID, Ready: true, Taker: true},
	}}); err != nil {
		t.Fatal(err)
	}
	// a's pod outside the ReplicaSet (the active primary's), c's in it.
	// a is down: nothing new is scheduled there (its node is unreachable).
	w := newRSWorld(1, "b")
	w.add("a", true)
	w.add("c", false)
	// A pod the ReplicaSet starts on b is a new copy: it joins, and
	// receives the new epoch's first snapshot, which c, the primary, took.
	w.placed = func(n replica.Node) {
		if _, err := storeB.GetVolume(ctx, id); err == nil {
			return // b's copy is there: its volume manager goes on with it
		}
		if _, err := storeB.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
			t.Errorf("b's copy: %v", err)
		}
		if _, err := states.Update(ctx, id, func(st *replica.State) error {
			replica.Join(st, n)
			if err := replica.Report(st, "c", replica.Snap{Number: 3, Epoch: 2, GUID: 3003}, true); err != nil {
				return err
			}
			return replica.Report(st, n, replica.Snap{Number: 3, Epoch: 2, GUID: 3003}, true)
		}); err != nil {
			t.Errorf("b joins: %v", err)
		}
	}

	// c's survivor sees a's lease stop and takes the volume over.
	leases := leaseMap{"a": {Value: "1"}, "b": {Value: "1"}, "c": {Value: "1"}}
	now := time.Duration(0)
	clock := func() time.Duration { return now }
	cfg := failover.Config{Node: "c", Lease: liveness.Config{Renew: time.Second, Duration: 5 * time.Second, Margin: 500 * time.Millisecond}, Lag: 1}
	survivor := failover.NewSurvivor(cfg, clock, leases, states, nil, storeC, w, nopEvents{}, zap.NewNop())
	step := func() {
		leases["b"] = ports.LeaseRecord{Value: now.String()}
		leases["c"] = ports.LeaseRecord{Value: now.String()}
		if err := survivor.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for ; now <= 5500*time.Millisecond; now += 500 * time.Millisecond {
		step()
	}
	if st, _ := states.Get(ctx, id); st.Primary != "c" || st.Epoch != 2 {
		t.Fatalf("c did not take over: %+v", st)
	}
	if w.onNode("a") >= 0 {
		t.Errorf("a's replica pod is still there after the takeover: %+v", w.pods)
	}

	// The writer's pod, deleted on a and started on c: its publish moves
	// c's replica pod out of the workload, then sizes it for the pods
	// outside (publish.Service.acquire: SetOutside, then resize).
	if err := w.SetOutside(ctx, id, "c", true); err != nil {
		t.Fatal(err)
	}
	st, _ := states.Get(ctx, id)
	ws, _ := w.Status(ctx, id, "c")
	if err := w.Apply(ctx, id, placement.DesiredAround(st, ws.Outside), 0); err != nil {
		t.Fatal(err)
	}
	if _, listed := st.Replica("b"); !listed {
		t.Fatalf("no copy joined on b: %+v", st)
	}

	// Placement periods while a stays lost: b's and c's daemons adopt and
	// size (c is the primary: its adopter is the sizer).
	adopterB := orchestration.NewAdopter("b", storeB, states, w, leaveHere("b", storeB, states), zap.NewNop())
	adopterC := orchestration.NewAdopter("c", storeC, states, w, leaveHere("c", storeC, states), zap.NewNop())
	period := func() {
		for _, a := range []*orchestration.Adopter{adopterB, adopterC} {
			if _, err := a.Sync(ctx); err != nil {
				t.Fatal(err)
			}
		}
		now += 10 * time.Second
		step()
	}
	for range 5 {
		period()
	}
	if n := w.deleted["b"]; n > 0 {
		t.Fatalf("the ReplicaSet deleted b's pod %d times while a, lost, kept its pod (removed by the survivor: %v): b's copy churned", n, w.removed)
	}
	if i := w.onNode("b"); i < 0 || w.pods[i].outside || w.replicas != 1 {
		t.Fatalf("b's copy is not the ReplicaSet's one secondary: replicas %d, pods %+v", w.replicas, w.pods)
	}

	// a returns, its pod gone: its copy, surplus (b and c hold the new
	// epoch's snapshot), leaves; nothing fights b for its place.
	leases["a"] = ports.LeaseRecord{Value: "2"}
	adopterA := orchestration.NewAdopter("a", storeA, states, w, leaveHere("a", storeA, states), zap.NewNop())
	if _, err := adopterA.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		period()
	}
	st, _ = states.Get(ctx, id)
	if _, listed := st.Replica("a"); listed || len(st.Replicas) != 2 {
		t.Fatalf("a's surplus copy did not leave: %+v", st.Replicas)
	}
	if n := w.deleted["b"] + w.deleted["a"]; n > 0 || w.onNode("b") < 0 {
		t.Fatalf("pods deleted by the ReplicaSet after a's return: b %d, a %d; pods %+v", w.deleted["b"], w.deleted["a"], w.pods)
	}
	if storeA.KeptFiles("kept/v-fenced-e2-ferry-1-2") == nil {
		t.Errorf("a's fenced term was not kept aside before its copy left")
	}
}
