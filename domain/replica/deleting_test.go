package replica

import (
	"errors"
	"testing"
)

// A volume being deleted (State.Deleting): every replica, the active
// primary included, leaves and its copy goes; nothing else counts as gone.

func TestLeaveHonoursVolumeGoneOnlyOnAStateBeingDeleted(t *testing.T) {
	base := func() State {
		return State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "a", Replicas: []Replica{
			{Node: "a", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 15, Active: true},
			{Node: "b", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 15},
		}}
	}
	holds := Holding{Newest: Snap{Number: 5, Epoch: 1, GUID: 15}, HasData: true}
	s2 := base()
	s2.Replicas[0].Snapshot, s2.Replicas[0].SnapshotGUID = 3, 13 // a holds less than b: b is the only copy of 5
	if _, err := Leave(&s2, "b", holds, true); !errors.Is(err, ErrUnsafe) || len(s2.Replicas) != 2 {
		t.Fatalf("a replica claiming its volume gone left the only copy of snapshot 5 of a volume not being deleted: %v, %+v", err, s2.Replicas)
	}
	s2.Deleting = true
	if _, err := Leave(&s2, "b", holds, true); err != nil || len(s2.Replicas) != 1 {
		t.Fatalf("a replica of a volume being deleted could not leave: %v, %+v", err, s2.Replicas)
	}
	// The active primary of a volume being deleted leaves too; of one that
	// is not, never.
	s := base()
	if _, err := Leave(&s, "a", holds, true); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("the active primary left a volume not being deleted: %v", err)
	}
	s.Deleting = true
	if _, err := Leave(&s, "a", holds, true); err != nil {
		t.Fatalf("the active primary of a volume being deleted could not leave: %v", err)
	}
}

func TestAMachineLeavesAVolumeBeingDeleted(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "b", Deleting: true, Replicas: []Replica{
		{Node: "b", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 15, Active: true, Ready: true},
	}}
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 1})
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 5, Epoch: 1, GUID: 15}}, HasData: true})
	a, ok := m.Next()
	lv, isLeave := a.(LeaveVolume)
	if !ok || !isLeave || !lv.VolumeGone {
		t.Fatalf("the primary of a volume being deleted decided %T %+v, want LeaveVolume{VolumeGone}", a, a)
	}
}
