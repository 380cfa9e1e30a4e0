package failover

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

type recordedEvent struct {
	Volume volume.ID
	ports.Event
}

type eventLog struct {
	mu  sync.Mutex
	got []recordedEvent
}

func (l *eventLog) Record(_ context.Context, id volume.ID, e ports.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, recordedEvent{id, e})
}

func (l *eventLog) reasons() map[volume.ID][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[volume.ID][]string{}
	for _, e := range l.got {
		out[e.Volume] = append(out[e.Volume], e.Reason)
	}
	return out
}

// returned is node a, back after b took volume vol over (epoch 4, b at
// primary): a's taint is on, and its entry and pool say what a holds.
type returned struct {
	t       *testing.T
	ctx     context.Context
	cluster *fakecluster.Store
	leases  *leaseMap
	clock   *fakeClock
	eff     *mocks.MockFailoverEffects
	events  *eventLog
	a       *Survivor

	mu      sync.Mutex
	pool    []ports.SnapshotInfo
	tainted bool
	lifted  []time.Duration
}

func newReturned(t *testing.T, rule liveness.TaintRule, states ...replica.State) *returned {
	ctrl := gomock.NewController(t)
	r := &returned{t: t, ctx: context.Background(), cluster: fakecluster.New(), clock: &fakeClock{}, events: &eventLog{}, tainted: true,
		leases: &leaseMap{vals: map[replica.Node]ports.LeaseRecord{"a": {Value: "0"}, "b": {Value: "0"}}}}
	var vols []ports.VolumeInfo
	for _, st := range states {
		if _, err := r.cluster.Create(r.ctx, st); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, ports.VolumeInfo{ID: st.Volume})
	}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return(vols, nil).AnyTimes()
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("")).DoAndReturn(func(context.Context, volume.ID) ([]ports.SnapshotInfo, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return append([]ports.SnapshotInfo(nil), r.pool...), nil
	}).AnyTimes()
	r.eff = newEffects(ctrl)
	r.eff.EXPECT().Tainted(gomock.Any(), replica.Node("a")).DoAndReturn(func(context.Context, replica.Node) (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.tainted, nil
	}).AnyTimes()
	r.a = NewSurvivor(Config{Node: "a", Lease: timing, Lag: 1, Taint: rule}, r.clock.read, r.leases, r.cluster, nil, store, r.eff, r.events, zap.NewNop())
	return r
}

// allowLift lets the survivor lift a's taint (gomock fails on a Taint
// call it was not told to expect).
func (r *returned) allowLift() {
	r.eff.EXPECT().Taint(gomock.Any(), replica.Node("a"), false).DoAndReturn(func(context.Context, replica.Node, bool) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.tainted = false
		r.lifted = append(r.lifted, r.clock.read())
		return nil
	}).AnyTimes()
}

func (r *returned) setPool(snaps ...ports.SnapshotInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pool = snaps
}

// run steps a every second from `from` to `to`, a (and b) renewing.
func (r *returned) run(from, to time.Duration) {
	for at := from; at <= to; at += time.Second {
		r.clock.set(at)
		r.leases.renew("a", at.String())
		r.leases.renew("b", at.String())
		if err := r.a.Step(r.ctx); err != nil {
			r.t.Fatal(err)
		}
	}
}

func (r *returned) liftedAt() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.lifted...)
}

func takenState(vol volume.ID, primary replica.Replica, a replica.Replica) replica.State {
	primary.Node, primary.Active, primary.Ready = "b", true, true
	a.Node = "a"
	return replica.State{Volume: vol, ReplicationFactor: 2, Epoch: 4, Primary: "b", Replicas: []replica.Replica{a, primary}}
}

// a's copy of "stuck" never becomes ready (a full pool, say: it stays at
// 5@3 while b is at 9@4) and holds nothing b lacks; its copy of "fine" is
// ready. a's taint goes as soon as a is seen renewing its lease again, and
// the stuck copy is reported on its volume instead of holding the node.
func TestAReturnedNodeWithACopyThatNeverGetsReadyIsNotHeldByIt(t *testing.T) {
	stuck := takenState("stuck", replica.Replica{Snapshot: 9, SnapshotEpoch: 4}, replica.Replica{Snapshot: 5, SnapshotEpoch: 3})
	fine := takenState("fine", replica.Replica{Snapshot: 9, SnapshotEpoch: 4}, replica.Replica{Snapshot: 9, SnapshotEpoch: 4, Ready: true})
	r := newReturned(t, liveness.TaintRule{}, stuck, fine)
	r.setPool(ports.SnapshotInfo{Volume: "fine", Name: "ferry-4-9"}, ports.SnapshotInfo{Volume: "stuck", Name: "ferry-3-5"})
	r.allowLift()
	r.run(0, 30*time.Second)
	// At 0 s a's lease is first seen; at 1 s it has changed: renewing.
	if got := r.liftedAt(); len(got) != 1 || got[0] != time.Second {
		t.Fatalf("lifted at %v, want once at 1 s", got)
	}
	if ev := r.events.reasons(); len(ev) != 1 || len(ev["stuck"]) != 1 || ev["stuck"][0] != "TaintLiftedCopyNotReady" {
		t.Fatalf("events %v, want one TaintLiftedCopyNotReady on stuck", ev)
	}
}

// a was the primary of epoch 3 and, cut off, took 8@3, which it could not
// report and b (taking over at 7@3) never received: a fenced branch that
// only a's pool shows. The taint stays while a holds it, and goes once its
// volume manager kept it aside and rolled back (a then at 8@4 like b).
func TestAReturnedNodeWhoseCopyStillHoldsAFencedBranchKeepsItsTaint(t *testing.T) {
	v := takenState("v", replica.Replica{Snapshot: 7, SnapshotEpoch: 3}, replica.Replica{Snapshot: 7, SnapshotEpoch: 3})
	r := newReturned(t, liveness.TaintRule{}, v)
	r.setPool(ports.SnapshotInfo{Volume: "v", Name: "ferry-3-7"}, ports.SnapshotInfo{Volume: "v", Name: "ferry-3-8"})
	r.run(0, 60*time.Second) // no Taint(a, false): gomock fails on one

	r.setPool(ports.SnapshotInfo{Volume: "v", Name: "ferry-3-7"}, ports.SnapshotInfo{Volume: "v", Name: "ferry-4-8"})
	if _, err := r.cluster.Update(r.ctx, "v", func(st *replica.State) error {
		if err := replica.Report(st, "b", replica.Snap{Number: 8, Epoch: 4}, true); err != nil {
			return err
		}
		return replica.Report(st, "a", replica.Snap{Number: 8, Epoch: 4}, true)
	}); err != nil {
		t.Fatal(err)
	}
	r.allowLift()
	r.run(61*time.Second, 70*time.Second)
	if got := r.liftedAt(); len(got) != 1 || got[0] > 66*time.Second {
		t.Fatalf("lifted at %v, want once within a check (5 s) of the rollback", got)
	}
	if ev := r.events.reasons(); len(ev) != 0 {
		t.Fatalf("events %v, want none: the copy is ready", ev)
	}
}

// The fenced branch stays (no room to keep it aside): the node is not held
// for ever. After FencedWait of renewing its lease, the taint goes, and the
// copy is reported.
func TestAFencedBranchThatStaysKeepsTheTaintOnlyForTheFencedWait(t *testing.T) {
	v := takenState("v", replica.Replica{Snapshot: 7, SnapshotEpoch: 3}, replica.Replica{Snapshot: 8, SnapshotEpoch: 3, Ready: true})
	r := newReturned(t, liveness.TaintRule{FencedWait: time.Minute}, v)
	r.setPool(ports.SnapshotInfo{Volume: "v", Name: "ferry-3-8"})
	r.allowLift()
	r.run(0, 90*time.Second)
	// First check at 1 s (the first renewal seen), then every 5 s: the
	// minute is over at the check of 61 s.
	if got := r.liftedAt(); len(got) != 1 || got[0] != 61*time.Second {
		t.Fatalf("lifted at %v, want once at 61 s", got)
	}
	if ev := r.events.reasons(); len(ev["v"]) != 1 || ev["v"][0] != "TaintLiftedFencedCopy" {
		t.Fatalf("events %v, want one TaintLiftedFencedCopy on v", ev)
	}
}
