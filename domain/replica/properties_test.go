package replica

import (
	"testing"
)

var nodes = []Node{"a", "b", "c", "d", "e"}

// decodeState builds a state of 1..5 replicas with snapshots 0..7 of epoch 1
// and a replication factor of 1..3 from fuzz bytes.
func decodeState(b []byte) State {
	s := State{Volume: "v", Epoch: 1, ReplicationFactor: 1}
	if len(b) == 0 {
		return s
	}
	s.ReplicationFactor = int(b[0]%3) + 1
	for i, x := range b[1:] {
		if i >= len(nodes) {
			break
		}
		s.Replicas = append(s.Replicas, Replica{Node: nodes[i], Snapshot: SnapshotNumber(x % 8), SnapshotEpoch: 1})
	}
	return s
}

func copiesOf(s State, n SnapshotNumber) int {
	c := 0
	for _, r := range s.Replicas {
		if n > 0 && r.Snapshot >= n {
			c++
		}
	}
	return c
}

// Every Leave runs on the newest state, as ClusterState.Update guarantees:
// replicas "leaving at once" are serialised by the compare-and-swap, the
// loser re-running its decision on the winner's result.
func FuzzLeaveNeverDropsCopiesOfTheNewestBelowTheBudget(f *testing.F) {
	f.Add([]byte{1, 5, 5, 4}, []byte{0, 1, 2})
	f.Add([]byte{0, 3, 3}, []byte{0, 1})
	f.Add([]byte{2, 7, 7, 7, 1, 0}, []byte{4, 3, 0, 1, 2})
	f.Fuzz(func(t *testing.T, stateBytes, leavers []byte) {
		s := decodeState(stateBytes)
		newest := s.Newest()
		budget := min(s.ReplicationFactor, copiesOf(s, newest))
		for _, l := range leavers {
			node := nodes[int(l)%len(nodes)]
			before := len(s.Replicas)
			r, _ := s.Replica(node)
			_, err := Leave(&s, node, Holding{Newest: Snap{Number: r.Snapshot, Epoch: r.SnapshotEpoch, GUID: r.SnapshotGUID}, HasData: r.Snapshot > 0}, false)
			if err == nil && before == len(s.Replicas) {
				if _, still := s.Replica(node); still {
					t.Fatalf("Leave(%s) succeeded but the entry is still listed", node)
				}
			}
			if got := copiesOf(s, newest); got < budget {
				t.Fatalf("after %s left: %d copies of snapshot %d, budget %d (rf %d): %+v", node, got, newest, budget, s.ReplicationFactor, s.Replicas)
			}
		}
	})
}

// A random sequence of promotions, demotions and reports never leaves two
// active primaries, and no epoch ever has two primaries.
func FuzzPromoteNeverMakesTwoPrimariesInOneEpoch(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{0x40, 0x81, 0xc2, 0x03, 0x44})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := State{Volume: "v", ReplicationFactor: 2, Epoch: 0}
		for _, n := range nodes[:3] {
			Join(&s, n)
		}
		primaryOf := map[Epoch]Node{}
		for _, op := range ops {
			node := nodes[int(op&3)%3]
			switch op >> 6 {
			case 0:
				if err := Promote(&s, node); err == nil {
					if p, ok := primaryOf[s.Epoch]; ok && p != node {
						t.Fatalf("epoch %d has primaries %s and %s", s.Epoch, p, node)
					}
					primaryOf[s.Epoch] = node
				}
			case 1:
				r, _ := s.Replica(node)
				_ = Demote(&s, node, s.Epoch-Epoch(op>>5&1), r.Holds())
			default:
				// the node reports a new snapshot of the current epoch if it
				// is the primary, else catches up to the newest
				r, _ := s.Replica(node)
				if r.Active {
					_ = Report(&s, node, Snap{Number: s.NextSnapshot(nil), Epoch: s.Epoch}, true)
				} else if n, ok := s.NewestReplica(); ok {
					_ = Report(&s, node, Snap{Number: n.Snapshot, Epoch: n.SnapshotEpoch}, true)
				}
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("after op %#x on %s: %v (%+v)", op, node, err, s)
			}
		}
	})
}
