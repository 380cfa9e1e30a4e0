package replica

import (
	"errors"
	"testing"
)

func threeReplicas(rf int) State {
	return State{Volume: "v", ReplicationFactor: rf, Epoch: 1, Replicas: []Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 1}, {Node: "b", Snapshot: 5, SnapshotEpoch: 1}, {Node: "c", Snapshot: 4, SnapshotEpoch: 1},
	}}
}

func TestChooseSourcePrefersTheNewestAndBreaksTiesByName(t *testing.T) {
	s := threeReplicas(2)
	if r, ok := ChooseSource(s, "c", nil); !ok || r.Node != "a" {
		t.Fatalf("source for c = %+v, %v; want a (tie with b, lower name)", r, ok)
	}
	if _, ok := ChooseSource(s, "a", nil); ok {
		t.Fatal("a is as new as anyone: it needs no source")
	}
	s.Replicas[2] = Replica{Node: "c", Snapshot: 3, SnapshotEpoch: 2}
	s.Epoch = 2
	if r, ok := ChooseSource(s, "a", nil); !ok || r.Node != "c" {
		t.Fatalf("source for a = %+v, %v; want c (epoch 2 beats a higher number of epoch 1)", r, ok)
	}
}

func TestPromoteStartsANewEpochAndRefusesASecondActivePrimary(t *testing.T) {
	s := threeReplicas(2)
	if err := Promote(&s, "c"); !errors.Is(err, ErrBehind) {
		t.Fatalf("promote a replica that is behind: %v, want ErrBehind", err)
	}
	if err := Promote(&s, "a"); err != nil {
		t.Fatal(err)
	}
	if s.Epoch != 2 || s.Primary != "a" || !s.Replicas[0].Active {
		t.Fatalf("after promote: %+v", s)
	}
	if err := Promote(&s, "a"); err != nil || s.Epoch != 2 {
		t.Fatalf("promote again is a no-op: %v, epoch %d", err, s.Epoch)
	}
	if err := Promote(&s, "b"); !errors.Is(err, ErrPrimaryActive) {
		t.Fatalf("second primary: %v, want ErrPrimaryActive", err)
	}
	final := Snap{Number: 6, Epoch: 2, GUID: 66}
	if err := Demote(&s, "a", 1, final); !errors.Is(err, ErrStaleView) {
		t.Fatalf("demote of the active primary with an old epoch: %v, want ErrStaleView", err)
	}
	if err := Demote(&s, "a", 0, Snap{}); !errors.Is(err, ErrStaleView) {
		t.Fatalf("confirming that the active primary is not active: %v, want ErrStaleView", err)
	}
	if err := Demote(&s, "b", 2, Snap{Number: 6, Epoch: 2}); !errors.Is(err, ErrFenced) {
		t.Fatalf("demote of a replica that is not the primary: %v, want ErrFenced", err)
	}
	if err := Demote(&s, "a", 2, Snap{Number: 5, Epoch: 1}); err == nil || !s.Replicas[0].Active {
		t.Fatalf("demote carrying a snapshot of an earlier term: %v, %+v", err, s.Replicas[0])
	}
	if err := Demote(&s, "a", 2, final); err != nil || s.Replicas[0].Active || s.Replicas[0].Holds() != final {
		t.Fatalf("demote: %v, %+v", err, s.Replicas[0])
	}
	if err := Promote(&s, "b"); !errors.Is(err, ErrBehind) {
		t.Fatalf("b, without the final snapshot, was promoted: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLeaveAppliesTheSafeDeletionRuleAndRemovesTheEntry(t *testing.T) {
	s := threeReplicas(1)
	if _, err := Leave(&s, "a", Holding{Newest: Snap{Number: 5, Epoch: 1}, HasData: true}, false); err != nil {
		t.Fatalf("a leaves with b at 5 and rf 1: %v", err)
	}
	if _, ok := s.Replica("a"); ok {
		t.Fatal("a is still listed")
	}
	if _, err := Leave(&s, "b", Holding{Newest: Snap{Number: 5, Epoch: 1}, HasData: true}, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("b is the last holder of 5: %v, want ErrUnsafe", err)
	}
	// c holds 4; b holds 5, newer: with rf 1, c may go.
	if _, err := Leave(&s, "c", Holding{Newest: Snap{Number: 4, Epoch: 1}, HasData: true}, false); err != nil {
		t.Fatalf("c, behind b, with rf 1: %v", err)
	}
	if _, ok := s.Replica("c"); ok || len(s.Replicas) != 1 {
		t.Fatalf("after c left: %+v", s.Replicas)
	}
}

func TestLeaveJudgesWhatTheReplicaHoldsNotItsLaggingEntry(t *testing.T) {
	// b received snapshot 6 but was stopped before reporting it: its entry
	// still says 0. Only b holds 6; it must not delete.
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 1}, {Node: "b"},
	}}
	if _, err := Leave(&s, "b", Holding{Newest: Snap{Number: 6, Epoch: 1}, HasData: true}, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("leave with unreported data: %v, want ErrUnsafe", err)
	}
	if _, err := Leave(&s, "z", Holding{Newest: Snap{Number: 6, Epoch: 1}, HasData: true}, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("an unlisted replica holding the newest data: %v, want ErrUnsafe", err)
	}
	if _, err := Leave(&s, "b", Holding{HasData: true}, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("a dataset never snapshotted may hold unique writes: %v, want ErrUnsafe", err)
	}
	if _, err := Leave(&s, "b", Holding{}, false); err != nil {
		t.Fatalf("a replica with no data may always leave: %v", err)
	}
}

func TestReportRefusesSnapshotsFromTheFuture(t *testing.T) {
	s := threeReplicas(2)
	if err := Report(&s, "c", Snap{Number: 9, Epoch: 5}, false); err == nil {
		t.Fatal("a snapshot of epoch 5 was accepted at epoch 1")
	}
	if err := Report(&s, "z", Snap{Number: 1, Epoch: 1}, false); !errors.Is(err, ErrUnknownReplica) {
		t.Fatalf("unknown node: %v", err)
	}
	if err := Report(&s, "c", Snap{Number: 5, Epoch: 1}, true); err != nil || !s.Replicas[2].Ready {
		t.Fatalf("report: %v %+v", err, s.Replicas[2])
	}
}

func TestRetainKeepsTheNewestAndEveryReplicasBase(t *testing.T) {
	s := threeReplicas(2) // a,b at 5; c at 4
	local := snaps([3]uint64{1, 1, 1}, [3]uint64{2, 2, 1}, [3]uint64{3, 3, 1}, [3]uint64{4, 4, 1}, [3]uint64{5, 5, 1})
	destroy := Retain(local, s, 1)
	got := map[SnapshotNumber]bool{}
	for _, d := range destroy {
		got[d.Number] = true
	}
	if len(destroy) != 3 || !got[1] || !got[2] || !got[3] {
		t.Fatalf("destroy %v; want 1, 2, 3 (4 is c's base, 5 the newest)", destroy)
	}
}

func TestReadinessAllowsTheConfiguredLag(t *testing.T) {
	s := threeReplicas(2)
	c, _ := s.Replica("c")
	if IsReady(s, c, 0) || !IsReady(s, c, 1) {
		t.Fatal("c is one behind: not ready with lag 0, ready with lag 1")
	}
	if n := s.NextSnapshot(nil); n != 6 {
		t.Fatalf("next snapshot %d, want 6", n)
	}
}

func TestLeaveCountsOnlyCopiesAtLeastAsNewByEpochAndTheSameByGUID(t *testing.T) {
	// A fenced old primary (a) reported 8 of epoch 1; b and c hold 8 of
	// epoch 2, the real newest. rf 1: after c leaves, b is the last copy.
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "b", Replicas: []Replica{
		{Node: "a", Snapshot: 8, SnapshotEpoch: 1, SnapshotGUID: 111},
		{Node: "b", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 222},
		{Node: "c", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 222},
	}}
	held := Holding{Newest: Snap{Number: 8, Epoch: 2, GUID: 222}, HasData: true}
	if _, err := Leave(&s, "c", held, false); err != nil {
		t.Fatalf("c, with b holding the same snapshot: %v", err)
	}
	if _, err := Leave(&s, "b", held, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("b left counting a's diverged 8 of epoch 1 as a copy: %v", err)
	}
	// The same number and epoch with another GUID is another snapshot.
	d := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{
		{Node: "a", Snapshot: 8, SnapshotEpoch: 1, SnapshotGUID: 1}, {Node: "b", Snapshot: 8, SnapshotEpoch: 1, SnapshotGUID: 2},
	}}
	if _, err := Leave(&d, "b", Holding{Newest: Snap{Number: 8, Epoch: 1, GUID: 2}, HasData: true}, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("b left counting a's different snapshot 8 as its copy: %v", err)
	}
}

func TestTakeoverRefusesAnEmptySuccessor(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 10, SnapshotEpoch: 1, Active: true}, {Node: "b", Taker: true},
	}}
	if err := Takeover(&s, "b", "a", 1); !errors.Is(err, ErrBehind) {
		t.Fatalf("an empty replica took over: %v", err)
	}
	if err := Takeover(&s, "a", "a", 1); err == nil {
		t.Fatal("the lost primary took over from itself")
	}
}

func TestAReplicaWhoseReceivedSnapshotThePeerPrunedRecovers(t *testing.T) {
	// b received 7 (full or incremental) but a, seeing b still at 5,
	// pruned 7; a now holds 9 and 11 of the same epoch.
	p := PlanTransfer([]Snap{{5, 50, 1}, {7, 70, 1}}, []Snap{{5, 50, 1}, {9, 90, 1}})
	if p.Kind != PlanRollbackIncremental || p.Base.Number != 5 {
		t.Fatalf("plan %v (%s): want a rollback to 5 (7 is an ancestor of 9)", p.Kind, p.Reason)
	}
	p = PlanTransfer([]Snap{{9, 90, 1}}, []Snap{{10, 100, 1}, {11, 110, 1}, {12, 120, 1}})
	if p.Kind != PlanReplace {
		t.Fatalf("plan %v (%s): want a replace, never a permanent conflict", p.Kind, p.Reason)
	}
}

// A secondary fetched 5, 6 and 7 while the API server was away and
// reported nothing; the primary pruned them all before its report of 7
// landed. The report moves its base to 7, which the primary no longer
// holds: the primary keeps 3, the newest it holds older than 7 (the
// secondary's old base), which the secondary rolls back to; destroying it
// left the secondary nothing in common with the primary, a full copy
// again (tests/replication's outage test saw it on a loaded machine).
func TestRetainKeepsWhatAReplicaReportedPastTheSnapshotsItNoLongerHasInCommon(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 10, SnapshotEpoch: 1, Active: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 1},
	}}
	local := snaps([3]uint64{1, 1, 1}, [3]uint64{3, 3, 1}, [3]uint64{8, 8, 1}, [3]uint64{9, 9, 1}, [3]uint64{10, 10, 1})
	destroy := Retain(local, s, 3)
	if len(destroy) != 1 || destroy[0].Number != 1 {
		t.Fatalf("destroy %v; want only 1 (3 is what b shares with a once it rolls back from 7)", destroy)
	}
	// A fetch target pruned likewise keeps the newest older one too.
	s.Replicas[1] = Replica{Node: "b", Snapshot: 1, SnapshotEpoch: 1, Fetching: Snap{Number: 7, Epoch: 1}}
	if destroy := Retain(local, s, 3); len(destroy) != 0 {
		t.Fatalf("destroy %v; want none (1 is b's base, 3 the newest older than its target 7)", destroy)
	}
}
