package replica

import (
	"errors"
	"testing"
)

var errTest = errors.New("injected")

// Wake and NeedsLocal let an idle volume manager read nothing until a
// change: each rule here fails when it is removed.

func settle(t *testing.T, m *Machine) {
	t.Helper()
	if a, ok := m.Next(); ok {
		t.Fatalf("expected nothing to do, got %T %+v", a, a)
	}
}

func TestWakeAnIdleSecondarySleepsUntilTheStateChanges(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Active: true},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Ready: true},
	}}
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Observed{State: s})
	if m.Wake() != 0 || !m.NeedsLocal() {
		t.Fatalf("a machine that never read its store must decide at once and list it: wake %d, needs local %v", m.Wake(), m.NeedsLocal())
	}
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 13}}, HasData: true})
	settle(t, m)
	for i := 0; i < 50; i++ {
		if w := m.Wake(); w >= 0 {
			t.Fatalf("an up-to-date secondary wants to decide again after %d ticks with nothing changed (wake %d)", i, w)
		}
		_ = m.Step(Tick{})
	}
	if m.NeedsLocal() {
		t.Fatal("nothing touched the store, yet the machine asks for a listing")
	}
	// The primary reports a newer snapshot: the change wakes the machine.
	s.Replicas[0].Snapshot, s.Replicas[0].SnapshotGUID = 4, 14
	_ = m.Step(Observed{State: s})
	if m.Wake() != 0 {
		t.Fatalf("a fresh view must be decided on: wake %d", m.Wake())
	}
	if a, ok := m.Next(); !ok {
		t.Fatal("the secondary does not catch up to the newer snapshot")
	} else if _, isRead := a.(ReadPeer); !isRead {
		t.Fatalf("expected ReadPeer, got %T", a)
	}
}

func TestWakeAnIdlePrimaryWakesForItsNextSnapshot(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "b", Replicas: []Replica{
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Active: true, Ready: true},
	}}
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 4})
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 13}}, HasData: true})
	settle(t, m)
	for want := 4; want > 0; want-- {
		if w := m.Wake(); w != want {
			t.Fatalf("primary between snapshots: wake %d, want %d", w, want)
		}
		_ = m.Step(Tick{})
	}
	if m.Wake() != 0 {
		t.Fatalf("the snapshot is due: wake %d", m.Wake())
	}
	_ = m.Step(Observed{State: s})
	a, ok := m.Next()
	if _, snap := a.(TakeSnapshot); !ok || !snap {
		t.Fatalf("expected TakeSnapshot when due, got %T", a)
	}
	_ = m.Step(ActionDone{Action: a})
	if !m.NeedsLocal() {
		t.Fatal("after its own snapshot the machine must list its store again")
	}
}

func TestWakeWorkInProgressDecidesAtTheNextTick(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Active: true},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Ready: true},
	}}
	for name, ev := range map[string]Event{"terminate": Terminate{}, "release": Release{}} {
		m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5})
		_ = m.Step(Observed{State: s})
		_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 13}}, HasData: true})
		settle(t, m)
		_ = m.Step(ev)
		if w := m.Wake(); w != 0 {
			t.Errorf("%s: wake %d, want 0 (decide at once)", name, w)
		}
	}
	// A failed action: retried on a later tick, not only on a change.
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5})
	s.Replicas[0].Snapshot, s.Replicas[0].SnapshotGUID = 4, 14
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 13}}, HasData: true})
	a, _ := m.Next()
	_ = m.Step(ActionDone{Action: a, Err: errTest})
	settle(t, m) // in backoff
	if w := m.Wake(); w != 0 {
		t.Fatalf("a failed read of the peer waits for a change only: wake %d", w)
	}
}

// The machine's own pruning costs no listing after it: once its destroy
// succeeded it knows what the store holds (what it held, without what it
// destroyed), and decides nothing more on it; after a failure (some may
// be gone) it lists the store again.
func TestWakeOwnPruningNeedsNoListingUnlessItFailed(t *testing.T) {
	for _, failed := range []bool{false, true} {
		s := State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []Replica{
			{Node: "a", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 15, Active: true},
			{Node: "b", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 15, Ready: true},
		}}
		m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
		_ = m.Step(Observed{State: s})
		_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 13}, {Number: 4, Epoch: 1, GUID: 14}, {Number: 5, Epoch: 1, GUID: 15}}, HasData: true})
		a, ok := m.Next()
		d, isDestroy := a.(DestroySnapshots)
		if !ok || !isDestroy || len(d.Snaps) != 1 || d.Snaps[0].Number != 3 {
			t.Fatalf("expected the destroy of snapshot 3, got %T %+v", a, a)
		}
		var err error
		if failed {
			err = errors.New("zfs destroy: dataset is busy")
		}
		_ = m.Step(ActionDone{Action: a, Err: err})
		if m.NeedsLocal() != failed {
			t.Fatalf("after a destroy that failed=%v, needs a listing = %v", failed, m.NeedsLocal())
		}
		if failed {
			continue
		}
		if a, ok := m.Next(); ok {
			t.Fatalf("nothing is left to do once snapshot 3 is gone, got %s", describe(a))
		}
		if got := m.newestLocal(); got.Number != 5 || len(m.local) != 2 {
			t.Fatalf("local view after the destroy: %v", m.local)
		}
	}
}
