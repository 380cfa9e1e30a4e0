package replica

import "testing"

// Every copy is the volume's size: a copy made by a receive has no quota
// and no reservation (it could fill its pool once promoted, and its pool
// reports room it does not have), and an expansion reaches every copy.

func grownState(capacity int64) State {
	return State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", CapacityBytes: capacity, Replicas: []Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Active: true},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 1, SnapshotGUID: 13, Ready: true},
	}}
}

var held = []Snap{{Number: 3, Epoch: 1, GUID: 13}}

func TestGrowAReceivedCopyTakesTheVolumesSize(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Observed{State: grownState(100)})
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityRead: true}) // received: no quota
	a, ok := m.Next()
	if g, isGrow := a.(Grow); !ok || !isGrow || g.Bytes != 100 {
		t.Fatalf("a copy without the volume's size: %T %+v, want Grow to 100", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	settle(t, m)
	// An expansion recorded in the state reaches the copy.
	_ = m.Step(Observed{State: grownState(250)})
	if a, _ := m.Next(); a != (Grow{Bytes: 250}) {
		t.Fatalf("after an expansion: %T %+v, want Grow to 250", a, a)
	}
}

func TestGrowNothingWhenTheSizeIsUnknownOrTheCopyIsLarger(t *testing.T) {
	for name, c := range map[string]struct {
		state, local int64
		hasData      bool
	}{
		"a state that does not tell the size": {0, 0, true},
		"a copy already larger":               {100, 200, true},
		"a copy of the volume's size":         {100, 100, true},
		"no copy yet":                         {100, 0, false},
	} {
		m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
		_ = m.Step(Observed{State: grownState(c.state)})
		snaps := held
		if !c.hasData {
			snaps = nil
		}
		_ = m.Step(LocalRead{Snaps: snaps, HasData: c.hasData, CapacityBytes: c.local, CapacityRead: true})
		if a, ok := m.Next(); ok {
			if _, grow := a.(Grow); grow {
				t.Errorf("%s: %+v", name, a)
			}
		}
	}
}

// A copy that cannot grow (its pool is full) is alerted once and keeps
// replicating; it tries again later.
func TestGrowAFailureIsAlertedOnceAndDoesNotStopReplication(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	s := grownState(100)
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityRead: true})
	a, _ := m.Next()
	_ = m.Step(ActionDone{Action: a, Err: errTest})
	_ = m.Step(Tick{}) // the failure's back-off
	a, ok := m.Next()
	if alert, isAlert := a.(Alert); !ok || !isAlert || alert.Reason == "" {
		t.Fatalf("after a failed growth: %T %+v, want an Alert", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	settle(t, m)
	// The primary moves on: the copy catches up although it cannot grow.
	s.Replicas[0].Snapshot, s.Replicas[0].SnapshotGUID = 4, 14
	_ = m.Step(Observed{State: s})
	if a, _ := m.Next(); a != (ReadPeer{Peer: "a"}) {
		t.Fatalf("a copy that cannot grow stopped replicating: %T %+v", a, a)
	}
	_ = m.Step(ActionDone{Action: ReadPeer{Peer: "a"}, Err: errTest})
	for range growRetryTicks {
		_ = m.Step(Tick{})
	}
	_ = m.Step(Observed{State: s})
	if a, _ := m.Next(); a != (Grow{Bytes: 100}) {
		t.Fatalf("after the wait: %T %+v, want Grow tried again", a, a)
	}
}

// The copy's size is read only when the machine does not know it: once,
// and again after a full receive made a new dataset; an incremental
// receive or a snapshot costs no read of it.
func TestGrowTheCopysSizeIsReadOnlyWhenUnknown(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Observed{State: grownState(100)})
	if !m.NeedsCapacity() {
		t.Fatal("a machine that never read the copy's size does not ask for it")
	}
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityBytes: 100, CapacityRead: true})
	if m.NeedsCapacity() {
		t.Fatal("asks for a size it knows")
	}
	base := held[0]
	done := func(a Action) {
		t.Helper()
		m.outstanding = a // as if Next had decided it
		if err := m.Step(ActionDone{Action: a}); err != nil {
			t.Fatal(err)
		}
	}
	done(Fetch{Peer: "a", Base: &base, Target: Snap{Number: 4, Epoch: 1, GUID: 14}})
	if m.NeedsCapacity() {
		t.Fatal("an incremental receive made it ask for the size again")
	}
	done(Fetch{Peer: "a", Target: Snap{Number: 4, Epoch: 1, GUID: 14}})
	if !m.NeedsCapacity() {
		t.Fatal("after a full receive (a new dataset, no quota) it does not ask for the size")
	}
	// Until it is read, no Grow is decided on a size it does not know.
	_ = m.Step(Observed{State: grownState(100)})
	_ = m.Step(LocalRead{Snaps: held, HasData: true})
	if a, ok := m.Next(); ok {
		if _, grow := a.(Grow); grow {
			t.Fatalf("a Grow decided on an unknown size: %+v", a)
		}
	}
}
