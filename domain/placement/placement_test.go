package placement

import (
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func state(rf int, rs ...replica.Replica) replica.State {
	s := replica.State{Volume: "v", ReplicationFactor: rf, Epoch: 2, Replicas: rs}
	for _, r := range rs {
		if r.Active {
			s.Primary = r.Node
		}
	}
	return s
}

func rep(n replica.Node, snap replica.SnapshotNumber, ready, active bool) replica.Replica {
	e := replica.Epoch(0)
	if snap > 0 {
		e = 2
	}
	return replica.Replica{Node: n, Snapshot: snap, SnapshotEpoch: e, Ready: ready, Active: active}
}

func TestDesired(t *testing.T) {
	cases := []struct {
		name     string
		s        replica.State
		deleting bool
		want     Objects
	}{
		{"new volume, rf 1, nothing yet", state(1), false,
			Objects{Secondaries: 1, MinAvailable: 1}},
		{"rf 1, idle: the only copy is never evicted", state(1, rep("a", 5, true, false)), false,
			Objects{Secondaries: 1, MinAvailable: 1, UsableOn: []replica.Node{"a"}}},
		{"rf 1, in use: the primary left the ReplicaSet", state(1, rep("a", 5, true, true)), false,
			Objects{Secondaries: 0, MinAvailable: 0, UsableOn: []replica.Node{"a"}}},
		{"rf 2, in use: the one secondary may go, the primary holds a copy; only the writer's node is usable", state(2, rep("a", 5, true, true), rep("b", 5, true, false)), false,
			Objects{Secondaries: 1, MinAvailable: 0, UsableOn: []replica.Node{"a"}}},
		{"rf 2, idle: one of two at a time", state(2, rep("a", 5, true, false), rep("b", 5, true, false)), false,
			Objects{Secondaries: 2, MinAvailable: 1, UsableOn: []replica.Node{"a", "b"}}},
		{"rf 3, in use, one catching up", state(3, rep("a", 9, true, true), rep("b", 9, true, false), rep("c", 2, false, false)), false,
			Objects{Secondaries: 2, MinAvailable: 1, UsableOn: []replica.Node{"a"}}},
		{"rf 3, idle, one catching up: not usable there", state(3, rep("a", 9, true, false), rep("b", 9, true, false), rep("c", 2, false, false)), false,
			Objects{Secondaries: 3, MinAvailable: 2, UsableOn: []replica.Node{"a", "b"}}},
		{"the active primary is usable even before it reports ready", state(2, rep("a", 0, false, true), rep("b", 0, true, false)), false,
			Objects{Secondaries: 1, MinAvailable: 0, UsableOn: []replica.Node{"a"}}},
		{"rf 3, idle", state(3, rep("a", 9, true, false), rep("b", 9, true, false), rep("c", 9, true, false)), false,
			Objects{Secondaries: 3, MinAvailable: 2, UsableOn: []replica.Node{"a", "b", "c"}}},
		{"deleting: the pods stay until their copies are gone, none protected, usable nowhere", state(2, rep("a", 5, true, false), rep("b", 5, true, false)), true,
			Objects{Secondaries: 2}},
	}
	for _, c := range cases {
		c.s.Deleting = c.deleting
		got := Desired(c.s)
		if got.Secondaries != c.want.Secondaries || got.MinAvailable != c.want.MinAvailable || !slices.Equal(got.UsableOn, c.want.UsableOn) {
			t.Errorf("%s: Desired = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// The rule the budget exists for: while no primary is active, a drain can
// never evict every pod holding a copy, whatever the replication factor.
func TestADrainNeverTakesTheLastCopy(t *testing.T) {
	for rf := 1; rf <= 5; rf++ {
		var rs []replica.Replica
		for i := range rf {
			rs = append(rs, rep(replica.Node(rune('a'+i)), 3, true, false))
		}
		o := Desired(state(rf, rs...))
		if o.MinAvailable < 1 || o.MinAvailable > o.Secondaries {
			t.Errorf("rf %d idle: minAvailable %d of %d secondaries", rf, o.MinAvailable, o.Secondaries)
		}
		if o.Secondaries-o.MinAvailable > 1 {
			t.Errorf("rf %d: a drain may take %d copies at once, want at most 1", rf, o.Secondaries-o.MinAvailable)
		}
	}
}

func TestAdopt(t *testing.T) {
	s := state(2, rep("a", 5, true, true), rep("b", 4, false, false))
	cases := []struct {
		name             string
		node             replica.Node
		current, running int
		want             Adoption
	}{
		{"a copy the list does not name is left alone", "c", 1, 1, Adoption{}},
		{"the active primary's pod is not the ReplicaSet's", "a", 1, 1, Adoption{Start: true, RaiseTo: 1}},
		{"a listed secondary whose pod is missing: room in the ReplicaSet", "b", 1, 0, Adoption{Start: true, RaiseTo: 1}},
		{"a listed secondary while all pods exist: raise first", "b", 1, 1, Adoption{Start: true, RaiseTo: 2}},
	}
	for _, c := range cases {
		got := Adopt(s, c.node, c.current, c.running)
		if got.Start != c.want.Start || got.RaiseTo != c.want.RaiseTo || got.Reason == "" {
			t.Errorf("%s: Adopt = %+v, want %+v with a reason", c.name, got, c.want)
		}
	}
}

func TestAVolumeBeingDeletedIsUsableNowhereAndItsListedCopiesLeaveWithoutAPod(t *testing.T) {
	s := state(2, rep("a", 5, true, false), rep("b", 5, true, false))
	s.Deleting = true
	if u := UsableOn(s); len(u) != 0 {
		t.Fatalf("a volume being deleted is usable on %v", u)
	}
	d := Adopt(s, "b", 0, 0)
	if !d.Leave || d.Start {
		t.Fatalf("Adopt for a copy of a volume being deleted = %+v: want it to leave where it is, no pod (the ReplicaSet, at 0, would delete one at once)", d)
	}
	if d := Adopt(s, "c", 0, 0); d.Start {
		t.Fatalf("an unlisted copy was started: %+v", d)
	}
}

// A secondary's copy found without a pod while the ReplicaSet already runs
// every secondary wanted (after a drain rebuilt it elsewhere) leaves if
// the rule allows, instead of a pod the ReplicaSet would delete at once;
// one the ReplicaSet misses is started, the ReplicaSet raised first.
func TestASurplusCopyLeavesAndAMissingOneStarts(t *testing.T) {
	s := state(2, rep("a", 9, true, true), rep("b", 2, true, false), rep("c", 9, true, false))
	d := Adopt(s, "b", 1, 1)
	if !d.Leave || !d.Start || d.RaiseTo != 2 {
		t.Fatalf("surplus copy: %+v, want leave (and start raised to 2 if the rule keeps it)", d)
	}
	d = Adopt(s, "b", 1, 0)
	if d.Leave || !d.Start || d.RaiseTo != 1 {
		t.Fatalf("copy the ReplicaSet misses: %+v, want a pod, no leave", d)
	}
}

// A workload made again runs no secondary of its own: the copies that
// exist are raised into it by their daemons, none is made elsewhere.
func TestARemadeWorkloadStartsWithNoSecondaryOfItsOwn(t *testing.T) {
	s := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Replicas: []replica.Replica{{Node: "a", Snapshot: 3, SnapshotEpoch: 1}, {Node: "b", Snapshot: 3, SnapshotEpoch: 1}}}
	if o := Remade(s); o.Secondaries != 0 || o.MinAvailable != Desired(s).MinAvailable {
		t.Fatalf("Remade = %+v, want no secondaries and Desired's budget %+v", o, Desired(s))
	}
}
