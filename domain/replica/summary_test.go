package replica

import "testing"

func TestSummarize(t *testing.T) {
	r := func(n Node, snap SnapshotNumber, e Epoch, ready bool) Replica {
		return Replica{Node: n, Snapshot: snap, SnapshotEpoch: e, Ready: ready}
	}
	cases := []struct {
		name     string
		s        State
		deleting bool
		want     Summary
	}{
		{"no replica yet", State{ReplicationFactor: 2, Epoch: 1}, false,
			Summary{Phase: PhasePending}},
		{"created, nothing ready", State{ReplicationFactor: 2, Epoch: 1, Replicas: []Replica{r("a", 0, 0, false)}}, false,
			Summary{Phase: PhasePending}},
		{"all ready", State{ReplicationFactor: 2, Epoch: 1, Replicas: []Replica{r("a", 7, 1, true), r("b", 6, 1, true)}}, false,
			Summary{Ready: 2, Newest: Snap{Number: 7, Epoch: 1}, MaxLag: 1, Phase: PhaseAvailable}},
		{"more ready than asked (scaling down)", State{ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{r("a", 7, 1, true), r("b", 7, 1, true)}}, false,
			Summary{Ready: 2, Newest: Snap{Number: 7, Epoch: 1}, Phase: PhaseAvailable}},
		{"one of three ready", State{ReplicationFactor: 3, Epoch: 2, Replicas: []Replica{r("a", 9, 2, true), r("b", 3, 1, false), r("c", 0, 0, false)}}, false,
			Summary{Ready: 1, Newest: Snap{Number: 9, Epoch: 2}, MaxLag: 9, Phase: PhaseDegraded}},
		{"newest by epoch, not by number", State{ReplicationFactor: 2, Epoch: 2, Replicas: []Replica{r("a", 5, 2, true), r("b", 6, 1, false)}}, false,
			Summary{Ready: 1, Newest: Snap{Number: 5, Epoch: 2}, Phase: PhaseDegraded}},
		{"deleting wins", State{ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{r("a", 7, 1, true)}}, true,
			Summary{Ready: 1, Newest: Snap{Number: 7, Epoch: 1}, Phase: PhaseTerminating}},
	}
	for _, c := range cases {
		if got := Summarize(c.s, c.deleting); got != c.want {
			t.Errorf("%s: Summarize = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestTheSummarySaysWhenTheNewestWasTakenAndHowManyCopiesReceive(t *testing.T) {
	s := State{ReplicationFactor: 3, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2, SnapshotGUID: 90, Active: true, Ready: true, SnapshotTaken: 1000},
		// The same snapshot, its time said later by its receiver.
		{Node: "b", Snapshot: 9, SnapshotEpoch: 2, SnapshotGUID: 90, Ready: true, SnapshotTaken: 1001},
		// An older snapshot, receiving the newest: its time is not the newest's.
		{Node: "c", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 80, SnapshotTaken: 5000, Fetching: Snap{Number: 9, Epoch: 2, GUID: 90}},
		// The same number of an earlier term: another snapshot.
		{Node: "d", Snapshot: 9, SnapshotEpoch: 1, SnapshotGUID: 91, SnapshotTaken: 6000},
	}}
	sum := Summarize(s, false)
	if sum.NewestTaken != 1001 || sum.Receiving != 1 {
		t.Errorf("NewestTaken %d, Receiving %d; want 1001 (of the newest snapshot only), 1", sum.NewestTaken, sum.Receiving)
	}
}

func TestAReportedTimeStaysWithItsSnapshot(t *testing.T) {
	s := State{ReplicationFactor: 1, Epoch: 1, Primary: "a", Replicas: []Replica{{Node: "a"}}}
	first := Snap{Number: 1, Epoch: 1, GUID: 11}
	if err := Report(&s, "a", first, true); err != nil {
		t.Fatal(err)
	}
	Stamp(&s, "a", Snap{Number: 2, Epoch: 1, GUID: 12}, 500) // not the one held: ignored
	if got := s.Replicas[0].SnapshotTaken; got != 0 {
		t.Fatalf("a time for snapshot 2 was recorded on snapshot 1: %d", got)
	}
	Stamp(&s, "a", first, 400)
	if err := Report(&s, "a", first, true); err != nil { // the same again: its time stays
		t.Fatal(err)
	}
	if got := s.Replicas[0].SnapshotTaken; got != 400 {
		t.Fatalf("snapshot 1's time %d, want 400", got)
	}
	if err := Report(&s, "a", Snap{Number: 2, Epoch: 1, GUID: 12}, true); err != nil {
		t.Fatal(err)
	}
	if got := s.Replicas[0].SnapshotTaken; got != 0 {
		t.Errorf("snapshot 2 reported with snapshot 1's time %d", got)
	}
}

func TestLagOfCountsTheSnapshotsBetweenACopyAndTheNewest(t *testing.T) {
	s := State{ReplicationFactor: 3, Epoch: 3, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 3, Active: true, Ready: true},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 3, Ready: true},
		{Node: "c", Snapshot: 6, SnapshotEpoch: 3},
		{Node: "d", Snapshot: 9, SnapshotEpoch: 2}, // the same number in an older term: diverged
		{Node: "e"},
	}}
	for _, c := range []struct {
		node   Node
		behind SnapshotNumber
		holds  bool
	}{{"a", 0, true}, {"b", 0, true}, {"c", 3, false}, {"d", 1, false}, {"e", 9, false}, {"gone", 9, false}} {
		behind, holds := LagOf(s, c.node)
		if behind != c.behind || holds != c.holds {
			t.Errorf("LagOf(%s) = %d, %v; want %d, %v", c.node, behind, holds, c.behind, c.holds)
		}
	}
	// A former primary on the branch a takeover left, its newest
	// snapshot 12 of epoch 2, forked at 7: 9 - 7 behind the successor's 9.
	fenced := State{ReplicationFactor: 2, Epoch: 3, Primary: "b", Replicas: []Replica{
		{Node: "a", Snapshot: 12, SnapshotEpoch: 2, Forked: Fork{Epoch: 3, At: Snap{Number: 7, Epoch: 2}}},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 3, Active: true, Ready: true},
	}}
	if behind, holds := LagOf(fenced, "a"); behind != 2 || holds {
		t.Errorf("LagOf(a on a fenced branch) = %d, %v; want 2, false", behind, holds)
	}
	if behind, holds := LagOf(State{ReplicationFactor: 1, Replicas: []Replica{{Node: "a"}}}, "a"); behind != 0 || holds {
		t.Errorf("no snapshot anywhere: LagOf = %d, %v; want 0, false", behind, holds)
	}
}
