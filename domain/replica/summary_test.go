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
