package replica

import (
	"errors"
	"testing"
)

// A rollback keeps a copy aside exactly when what it discards may be
// writes held nowhere else: a snapshot of an ended epoch, or changes never
// snapshotted after one. Ancestors of the newest snapshot (of the current epoch)
// that the peer pruned are the volume's own: nothing is kept for them.
func TestRollbackKeepsAFencedTermsWritesOnly(t *testing.T) {
	m := NewMachine(MachineConfig{Self: "a"})
	m.state = State{Epoch: 3, Primary: "b"}
	base := Snap{Number: 1, Epoch: 1, GUID: 11}
	cases := []struct {
		name    string
		discard []Snap
		changed bool
		want    string
	}{
		{"a snapshot of an ended epoch", []Snap{{Number: 2, Epoch: 2, GUID: 12}}, false, "fenced-e3-ferry-2-2"},
		{"the newest of several names the copy", []Snap{{Number: 2, Epoch: 2, GUID: 12}, {Number: 4, Epoch: 2, GUID: 14}, {Number: 3, Epoch: 3, GUID: 13}}, false, "fenced-e3-ferry-3-3"},
		{"changes never snapshotted after a snapshot of an ended epoch", nil, true, "fenced-e3-ferry-1-1"},
		{"pruned ancestors of the current epoch", []Snap{{Number: 2, Epoch: 3, GUID: 12}}, false, ""},
	}
	for _, c := range cases {
		if got := m.keepAs(base, c.discard, c.changed); got != c.want {
			t.Errorf("%s: keepAs = %q, want %q", c.name, got, c.want)
		}
	}
	// A secondary's changes on top of the current epoch's snapshot (access
	// times of reads) are no one's writes: kept, they would fill the pool.
	if got := m.keepAs(Snap{Number: 5, Epoch: 3, GUID: 15}, nil, true); got != "" {
		t.Errorf("changes after a snapshot of the current epoch: keepAs = %q, want none", got)
	}
}

// A copy that goes whole (a leave) is kept aside when it may hold a
// fenced term's writes: its newest snapshot is of an ended epoch and is
// not the one the current primary's entry names (it may be off the
// volume's history), or changes on top of it cannot be ruled out. A copy
// ending in the current epoch, or at the primary's snapshot with a pool
// that tells nothing was written since, keeps nothing.
func TestALeavingCopyKeepsAFencedTermsWritesOnly(t *testing.T) {
	s := State{Epoch: 3, Primary: "b", Replicas: []Replica{
		{Node: "a", Snapshot: 4, SnapshotEpoch: 2, SnapshotGUID: 14},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 13, Active: true},
	}}
	base := Snap{Number: 3, Epoch: 2, GUID: 13}
	cases := []struct {
		name string
		h    Holding
		want string
	}{
		{"a snapshot of an ended epoch the primary never held", Holding{Newest: Snap{Number: 4, Epoch: 2, GUID: 14}, HasData: true}, "fenced-e3-ferry-2-4"},
		{"...even where the pool tells nothing was written since", Holding{Newest: Snap{Number: 4, Epoch: 2, GUID: 14}, HasData: true, Unchanged: true}, "fenced-e3-ferry-2-4"},
		{"the primary's snapshot with changes after it", Holding{Newest: base, HasData: true}, "fenced-e3-ferry-2-3"},
		{"the primary's snapshot, unchanged since", Holding{Newest: base, HasData: true, Unchanged: true}, ""},
		{"the same number of the ended epoch, another GUID", Holding{Newest: Snap{Number: 3, Epoch: 2, GUID: 99}, HasData: true, Unchanged: true}, "fenced-e3-ferry-2-3"},
		{"a snapshot of the current epoch, changed since (access times)", Holding{Newest: Snap{Number: 5, Epoch: 3, GUID: 15}, HasData: true}, ""},
		{"no data", Holding{}, ""},
	}
	for _, c := range cases {
		if got := KeepBeforeLeaving(s, c.h); got != c.want {
			t.Errorf("%s: KeepBeforeLeaving = %q, want %q", c.name, got, c.want)
		}
	}
}

// The safe-deletion rule, on the newest state, lets a copy that may hold
// a fenced term's writes go only once they were kept aside: a leave
// decided on a view from before the takeover, which named nothing to
// keep, is refused. A volume being deleted takes them with it.
func TestLeaveRefusesACopyWithFencedWritesNotKeptAside(t *testing.T) {
	fresh := func() State {
		return State{Volume: "v", ReplicationFactor: 1, Epoch: 3, Primary: "b", Replicas: []Replica{
			{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 13},
			{Node: "b", Snapshot: 4, SnapshotEpoch: 3, SnapshotGUID: 14, Active: true},
		}}
	}
	fenced := Holding{Newest: Snap{Number: 3, Epoch: 2, GUID: 13}, HasData: true}
	s := fresh()
	if _, err := Leave(&s, "a", fenced, false); !errors.Is(err, ErrUnsafe) || len(s.Replicas) != 2 {
		t.Fatalf("a left with a fenced term's writes not kept aside: %v, %+v", err, s.Replicas)
	}
	kept := fenced
	kept.Kept = "fenced-e3-ferry-2-3"
	if _, err := Leave(&s, "a", kept, false); err != nil || len(s.Replicas) != 1 {
		t.Fatalf("a, its writes kept aside, could not leave: %v, %+v", err, s.Replicas)
	}
	d := fresh()
	d.Deleting = true
	if _, err := Leave(&d, "a", fenced, true); err != nil {
		t.Fatalf("the copy of a volume being deleted: %v", err)
	}
}

// A terminated replica lists its store again before it decides to leave
// (what it holds now, and whether it changed), and names the copy to
// keep; the copy of a volume being deleted keeps nothing.
func TestATerminatedReplicaNamesTheCopyToKeepBeforeLeaving(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 3, Primary: "b", Replicas: []Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 13},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 13, Active: true},
	}}
	local := []Snap{{Number: 3, Epoch: 2, GUID: 13}}
	for _, c := range []struct {
		name      string
		gone      bool
		unchanged bool
		want      string
	}{
		{"changed since the primary's snapshot", false, false, "fenced-e3-ferry-2-3"},
		{"unchanged since the primary's snapshot", false, true, ""},
		{"the volume is deleted", true, false, ""},
	} {
		m := NewMachine(MachineConfig{Self: "a"})
		_ = m.Step(Observed{State: s})
		_ = m.Step(LocalRead{Snaps: local, HasData: true, Unchanged: true})
		if c.gone {
			deleting := s
			deleting.Deleting = true
			_ = m.Step(Observed{State: deleting})
		}
		_ = m.Step(Terminate{})
		if _, ok := m.Next(); ok {
			t.Fatalf("%s: decided on the store as listed before the termination", c.name)
		}
		_ = m.Step(LocalRead{Snaps: local, HasData: true, Unchanged: c.unchanged})
		a, _ := m.Next()
		lv, ok := a.(LeaveVolume)
		if !ok || lv.KeepAs != c.want || lv.Holds.Unchanged != c.unchanged {
			t.Errorf("%s: decided %T %+v, want LeaveVolume keeping %q", c.name, a, a, c.want)
		}
	}
}
