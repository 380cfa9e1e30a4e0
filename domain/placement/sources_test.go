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
