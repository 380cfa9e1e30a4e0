package replica

import (
	"maps"
	"testing"
)

// Every copy holds the volume's properties: a copy made by a full
// receive has its pool's defaults (the stream carries no properties), and
// a promoted copy must run as its StorageClass said. atime matters even
// on a secondary: with atime on, a read of its mountpoint changes it and
// its next incremental receive is refused.

func conformState(props map[string]string) State {
	s := grownState(0)
	s.Properties = props
	return s
}

func TestConformAReceivedCopyTakesTheVolumesProperties(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Observed{State: conformState(map[string]string{"atime": "off", "compression": "lz4", "recordsize": "16384"})})
	if !m.NeedsCapacity() {
		t.Fatal("a state naming properties does not ask for the copy's")
	}
	// Received: the pool's defaults, recordsize as wanted already.
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityRead: true,
		Properties: map[string]string{"atime": "on", "compression": "off", "recordsize": "16384"}})
	a, ok := m.Next()
	c, isConform := a.(Conform)
	if !ok || !isConform || !maps.Equal(c.Properties, map[string]string{"atime": "off", "compression": "lz4"}) {
		t.Fatalf("a copy with its pool's defaults: %T %+v, want Conform of atime and compression only", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	settle(t, m)
	// After a full receive the new dataset is read and set again.
	m.outstanding = Fetch{Peer: "a", Target: Snap{Number: 4, Epoch: 1, GUID: 14}}
	_ = m.Step(ActionDone{Action: m.outstanding})
	if !m.NeedsCapacity() {
		t.Fatal("after a full receive the copy's properties are not read again")
	}
}

func TestConformNothingWhenNoneAreRecordedOrTheyAgree(t *testing.T) {
	for name, c := range map[string]struct {
		state, local map[string]string
		hasData      bool
	}{
		"a state that records none": {nil, map[string]string{"atime": "on"}, true},
		"a copy that agrees":        {map[string]string{"atime": "off"}, map[string]string{"atime": "off", "compression": "on"}, true},
		"no copy yet":               {map[string]string{"atime": "off"}, nil, false},
	} {
		m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
		_ = m.Step(Observed{State: conformState(c.state)})
		snaps := held
		if !c.hasData {
			snaps = nil
		}
		_ = m.Step(LocalRead{Snaps: snaps, HasData: c.hasData, CapacityRead: true, Properties: c.local})
		if a, ok := m.Next(); ok {
			if _, conform := a.(Conform); conform {
				t.Errorf("%s: %+v", name, a)
			}
		}
	}
	// Properties unknown (not read yet): nothing decided on a guess.
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Observed{State: conformState(map[string]string{"atime": "off"})})
	_ = m.Step(LocalRead{Snaps: held, HasData: true})
	if a, ok := m.Next(); ok {
		if _, conform := a.(Conform); conform {
			t.Errorf("a Conform decided on properties never read: %+v", a)
		}
	}
}

// A copy whose properties cannot be set is alerted once and keeps
// replicating; it tries again later.
func TestConformAFailureIsAlertedOnceAndDoesNotStopReplication(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	s := conformState(map[string]string{"compression": "zstd"})
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityRead: true, Properties: map[string]string{"compression": "off"}})
	a, _ := m.Next()
	if _, ok := a.(Conform); !ok {
		t.Fatalf("%T %+v, want Conform", a, a)
	}
	_ = m.Step(ActionDone{Action: a, Err: errTest})
	_ = m.Step(Tick{})
	a, ok := m.Next()
	if alert, isAlert := a.(Alert); !ok || !isAlert || alert.Event != CopyCannotConform {
		t.Fatalf("after a failed Conform: %T %+v, want its Alert", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	settle(t, m)
	s.Replicas[0].Snapshot, s.Replicas[0].SnapshotGUID = 4, 14
	_ = m.Step(Observed{State: s})
	if a, _ := m.Next(); a != (ReadPeer{Peer: "a"}) {
		t.Fatalf("a copy that cannot conform stopped replicating: %T %+v", a, a)
	}
	_ = m.Step(ActionDone{Action: ReadPeer{Peer: "a"}, Err: errTest})
	for range growRetryTicks {
		_ = m.Step(Tick{})
	}
	_ = m.Step(Observed{State: s})
	if a, _ := m.Next(); func() bool { _, ok := a.(Conform); return !ok }() {
		t.Fatalf("after the wait: %T %+v, want Conform tried again", a, a)
	}
}

// A copy that can neither grow nor take the volume's properties says each
// once and goes on replicating: two standing alerts of different kinds
// never take turns for ever (which would starve every other action).
func TestConformAndGrowFailingTogetherAreEachAlertedOnce(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	s := conformState(map[string]string{"compression": "zstd"})
	s.CapacityBytes = 100
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: held, HasData: true, CapacityRead: true, Properties: map[string]string{"compression": "off"}})
	fail := func(want string) {
		t.Helper()
		a, _ := m.Next()
		switch want {
		case "grow":
			if _, ok := a.(Grow); !ok {
				t.Fatalf("%T %+v, want Grow", a, a)
			}
		case "conform":
			if _, ok := a.(Conform); !ok {
				t.Fatalf("%T %+v, want Conform", a, a)
			}
		}
		_ = m.Step(ActionDone{Action: a, Err: errTest})
		_ = m.Step(Tick{})
	}
	fail("grow")
	// The grow's alert, then the conform (tried while grow waits) fails.
	a, _ := m.Next()
	if al, ok := a.(Alert); !ok || al.Event != CopyCannotGrow {
		t.Fatalf("%T %+v, want the grow's alert", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	fail("conform")
	a, _ = m.Next()
	if al, ok := a.(Alert); !ok || al.Event != CopyCannotConform {
		t.Fatalf("%T %+v, want the conform's alert", a, a)
	}
	_ = m.Step(ActionDone{Action: a})
	// Both said: the primary's next snapshot is fetched, no alert again.
	s.Replicas[0].Snapshot, s.Replicas[0].SnapshotGUID = 4, 14
	_ = m.Step(Observed{State: s})
	for i := 0; i < 3; i++ {
		a, ok := m.Next()
		if _, alert := a.(Alert); alert {
			t.Fatalf("step %d: %+v again: the alerts take turns", i, a)
		}
		if a == (ReadPeer{Peer: "a"}) {
			return
		}
		if !ok {
			break
		}
		_ = m.Step(ActionDone{Action: a})
	}
	t.Fatal("a copy that can neither grow nor conform stopped replicating")
}
