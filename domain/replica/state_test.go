package replica

import (
	"strings"
	"testing"
)

func TestSnapshotNamesRoundTripAndRejectLookalikes(t *testing.T) {
	for _, n := range []SnapshotNumber{1, 2, 10, 18446744073709551615} {
		got, ok := ParseSnapshotName(SnapshotName(n))
		if !ok || got != n {
			t.Errorf("ParseSnapshotName(%q) = %d, %v", SnapshotName(n), got, ok)
		}
	}
	for _, s := range []string{"ferry-0", "ferry-01", "ferry-", "ferry-x", "csi-ferry-1", "ferry-1a", "ferry-18446744073709551616"} {
		if _, ok := ParseSnapshotName(s); ok {
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
	good := State{ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []Replica{{Node: "a", Active: true, SnapshotEpoch: 2}, {Node: "b", SnapshotEpoch: 1}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]State{
		"two active":         {ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{{Node: "a", Active: true}, {Node: "b", Active: true}}},
		"active not primary": {ReplicationFactor: 1, Epoch: 2, Primary: "b", Replicas: []Replica{{Node: "a", Active: true}}},
		"future epoch":       {ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "a", SnapshotEpoch: 2}}},
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
