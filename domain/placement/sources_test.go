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

func TestACloneIsMadeOfTheNewestSnapshotOfTheCopyHoldingIt(t *testing.T) {
	s := replica.State{Volume: "v", ReplicationFactor: 3, Epoch: 4, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 12, SnapshotEpoch: 3, SnapshotGUID: 9, Forked: replica.Fork{Epoch: 4, At: replica.Snap{Number: 7, Epoch: 3}}}, // a fenced branch
		{Node: "b", Snapshot: 8, SnapshotEpoch: 4, SnapshotGUID: 80, Active: true},
		{Node: "c", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 70},
	}}
	n, snap, ok := CloneSource(s, "d")
	if !ok || n != "b" || snap != (replica.Snap{Number: 8, Epoch: 4, GUID: 80}) {
		t.Fatalf("CloneSource = %s, %+v, %v; want b's ferry-4-8", n, snap, ok)
	}
	if _, _, ok := CloneSource(replica.State{Replicas: []replica.Replica{{Node: "a"}}}, "d"); ok {
		t.Error("a clone source named where no copy holds a snapshot")
	}
}
