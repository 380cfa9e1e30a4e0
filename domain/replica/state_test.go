package replica

import (
	"strings"
	"testing"
)

func TestSnapshotNamesCarryTheEpochRoundTripAndRejectLookalikes(t *testing.T) {
	for _, sn := range []Snap{{Number: 1, Epoch: 1}, {Number: 2, Epoch: 7}, {Number: 10, Epoch: 3}, {Number: 18446744073709551615, Epoch: 18446744073709551615}} {
		n, e, ok := ParseSnapshotName(SnapshotName(sn))
		if !ok || n != sn.Number || e != sn.Epoch {
			t.Errorf("ParseSnapshotName(%q) = %d, %d, %v", SnapshotName(sn), n, e, ok)
		}
	}
	if got := SnapshotName(Snap{Number: 12, Epoch: 3}); got != "ferry-3-12" {
		t.Errorf("SnapshotName = %q, want ferry-3-12", got)
	}
	for _, s := range []string{"ferry-0-1", "ferry-1-0", "ferry-01-1", "ferry-1-01", "ferry-1", "ferry-", "ferry-1-", "ferry--1",
		"ferry-x-1", "csi-ferry-1-1", "ferry-1-1a", "ferry-1-1-1", "ferry-+1-1", "ferry-1-18446744073709551616", "Ferry-1-1"} {
		if _, _, ok := ParseSnapshotName(s); ok {
			t.Errorf("ParseSnapshotName(%q) accepted", s)
		}
	}
}

func TestCanDestroy(t *testing.T) {
	state := func(rf int, snaps map[Node]SnapshotNumber) State {
		s := State{Volume: "v", ReplicationFactor: rf, Epoch: 1}
		for _, n := range []Node{"a", "b", "c", "d"} {
			if sn, ok := snaps[n]; ok {
				s.Replicas = append(s.Replicas, Replica{Node: n, Snapshot: sn, SnapshotEpoch: 1})
			}
		}
		return s
	}
	cases := []struct {
		name    string
		s       State
		node    Node
		gone    bool
		allowed bool
	}{
		{"volume deleted", state(2, map[Node]SnapshotNumber{"a": 5}), "a", true, true},
		{"no data held", state(2, map[Node]SnapshotNumber{"a": 0, "b": 5}), "a", false, true},
		{"not in the list", state(2, map[Node]SnapshotNumber{"b": 5}), "a", false, true},
		{"enough newer copies", state(2, map[Node]SnapshotNumber{"a": 5, "b": 5, "c": 6}), "a", false, true},
		{"one copy short", state(2, map[Node]SnapshotNumber{"a": 5, "b": 5, "c": 4}), "a", false, false},
		{"last copy", state(1, map[Node]SnapshotNumber{"a": 5}), "a", false, false},
		{"others are behind", state(1, map[Node]SnapshotNumber{"a": 5, "b": 4, "c": 3}), "a", false, false},
	}
	for _, c := range cases {
		v := CanDestroy(c.s, c.node, c.gone)
		if v.Allowed != c.allowed || v.Reason == "" {
			t.Errorf("%s: %+v, want allowed=%v with a reason", c.name, v, c.allowed)
		}
	}
}

func TestStateValidateHoldsTheInvariants(t *testing.T) {
	good := State{ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []Replica{{Node: "a", Active: true, Snapshot: 3, SnapshotEpoch: 2}, {Node: "b", Snapshot: 2, SnapshotEpoch: 1, Fetching: Snap{Number: 3, Epoch: 2}}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]State{
		"two active":         {ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{{Node: "a", Active: true}, {Node: "b", Active: true}}},
		"active not primary": {ReplicationFactor: 1, Epoch: 2, Primary: "b", Replicas: []Replica{{Node: "a", Active: true}}},
		"future epoch":       {ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "a", Snapshot: 1, SnapshotEpoch: 2}}},
		"fetching a future":  {ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "a", Fetching: Snap{Number: 1, Epoch: 2}}}},
		"snapshot, no epoch": {ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "a", Snapshot: 1}}},
		"epoch, no snapshot": {ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "a", SnapshotEpoch: 1}}},
		"duplicate node":     {ReplicationFactor: 1, Replicas: []Replica{{Node: "a"}, {Node: "a"}}},
		"unsorted":           {ReplicationFactor: 1, Replicas: []Replica{{Node: "b"}, {Node: "a"}}},
		"empty node":         {ReplicationFactor: 1, Replicas: []Replica{{Node: ""}}},
	}
	bad["no replication factor"] = State{Replicas: []Replica{{Node: "a"}}}
	for name, s := range bad {
		if err := s.Validate(); err == nil || strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: Validate() = %v, want an error", name, err)
		}
	}
}
