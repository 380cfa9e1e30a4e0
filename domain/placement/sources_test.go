package placement

import (
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestSnapshotSourcesAskTheVolumesCopiesFirstThenEveryOtherNodeOnceNeverSelf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		self          replica.Node
		copies, nodes []replica.Node
		want          []replica.Node
	}{
		{"no copies known: every other node by name", "n2", nil, []replica.Node{"n3", "n1", "n2"}, []replica.Node{"n1", "n3"}},
		{"copies first, by name", "n1", []replica.Node{"n4", "n3"}, []replica.Node{"n1", "n2", "n3", "n4", "n5"}, []replica.Node{"n3", "n4", "n2", "n5"}},
		{"a copy on a node without a lease is still asked", "n1", []replica.Node{"n9"}, []replica.Node{"n1", "n2"}, []replica.Node{"n9", "n2"}},
		{"self and empty names never", "n1", []replica.Node{"n1", ""}, []replica.Node{"", "n1"}, nil},
		{"duplicates once", "n1", []replica.Node{"n2", "n2"}, []replica.Node{"n2", "n3", "n3"}, []replica.Node{"n2", "n3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SnapshotSources(tc.self, tc.copies, tc.nodes); !slices.Equal(got, tc.want) {
				t.Fatalf("SnapshotSources(%s, %v, %v) = %v, want %v", tc.self, tc.copies, tc.nodes, got, tc.want)
			}
		})
	}
}

func TestACloneIsMadeOfTheNewestSnapshotFromEveryCopyHoldingIt(t *testing.T) {
	s := replica.State{Volume: "v", ReplicationFactor: 4, Epoch: 4, Primary: "c", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 12, SnapshotEpoch: 3, SnapshotGUID: 9, Forked: replica.Fork{Epoch: 4, At: replica.Snap{Number: 7, Epoch: 3}}}, // a fenced branch
		{Node: "b", Snapshot: 8, SnapshotEpoch: 4, SnapshotGUID: 80},
		{Node: "c", Snapshot: 8, SnapshotEpoch: 4, SnapshotGUID: 80, Active: true},
		{Node: "d", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 70},
	}}
	snap, from := CloneSources(s, "e")
	if snap != (replica.Snap{Number: 8, Epoch: 4, GUID: 80}) || !slices.Equal(from, []replica.Node{"b", "c"}) {
		t.Fatalf("CloneSources = %+v, %v; want ferry-4-8 from b, then c", snap, from)
	}
	if _, from := CloneSources(s, "b"); !slices.Equal(from, []replica.Node{"c"}) {
		t.Fatalf("from b itself: %v, want [c]", from)
	}
	// A snapshot of a history a takeover gave up (newer than the primary's
	// in an earlier epoch) is never cloned.
	given := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 3, Primary: "b", Replicas: []replica.Replica{
		{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Active: true},
		{Node: "c", Snapshot: 9, SnapshotEpoch: 2},
	}}
	if _, from := CloneSources(given, "e"); len(from) != 0 {
		t.Errorf("a given-up snapshot offered to clone from %v", from)
	}
	for name, st := range map[string]replica.State{
		"no snapshot yet":   {Replicas: []replica.Replica{{Node: "a"}}},
		"rebuilt, awaiting": {Epoch: 4, Primary: "c", Replicas: s.Replicas, Awaiting: []replica.Node{"d"}},
		"deleting":          {Epoch: 4, Primary: "c", Replicas: s.Replicas, Deleting: true},
	} {
		if _, from := CloneSources(st, "e"); len(from) != 0 {
			t.Errorf("%s: clone sources %v", name, from)
		}
	}
}
