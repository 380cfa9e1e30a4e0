package replica

import (
	"testing"
)

var nodes = []Node{"a", "b", "c", "d", "e"}

// fuzzWorld is what the fuzz bytes describe: a volume state of epoch 1..4
// with 1..5 replicas, and what each replica's store really holds (its
// newest snapshot, of an epoch up to the volume's). An entry may lag its
// store (a snapshot received, not yet reported) but never claims more.
type fuzzWorld struct {
	s      State
	stores map[Node]Snap
}

func guidOf(n SnapshotNumber, e Epoch) uint64 { return uint64(e)<<32 | uint64(n) }

func decodeWorld(b []byte) fuzzWorld {
	w := fuzzWorld{s: State{Volume: "v", Epoch: 1, ReplicationFactor: 1}, stores: map[Node]Snap{}}
	if len(b) == 0 {
		return w
	}
	w.s.ReplicationFactor = int(b[0]%3) + 1
	w.s.Epoch = Epoch(b[0]>>2%4) + 1
	for i, x := range b[1:] {
		if i >= len(nodes) {
			break
		}
		num := SnapshotNumber(x % 8)
		epoch := min(Epoch(x>>3%4)+1, w.s.Epoch)
		held := Snap{}
		if num > 0 {
			held = Snap{Number: num, Epoch: epoch, GUID: guidOf(num, epoch)}
		}
		w.stores[nodes[i]] = held
		entry := held
		switch x >> 5 {
		case 1: // the report of the newest was lost: the entry says nothing
			entry = Snap{}
		case 2: // the entry lags by one snapshot of the same epoch
			if held.Number > 1 {
				entry = Snap{Number: held.Number - 1, Epoch: held.Epoch, GUID: guidOf(held.Number-1, held.Epoch)}
			}
		}
		r := Replica{Node: nodes[i]}
		if entry.Number > 0 {
			r.Snapshot, r.SnapshotEpoch, r.SnapshotGUID = entry.Number, entry.Epoch, entry.GUID
		}
		w.s.Replicas = append(w.s.Replicas, r)
	}
	return w
}

// newestHeld is the newest snapshot any store holds, and how many stores
// hold it or a newer one.
func (w fuzzWorld) newestHeld() (Snap, int) {
	var best Snap
	for _, h := range w.stores {
		if h.Newer(best) {
			best = h
		}
	}
	c := 0
	for _, h := range w.stores {
		if best.Number > 0 && (h == best || h.Newer(best)) {
			c++
		}
	}
	return best, c
}

// Every Leave runs on the newest state, as ClusterState.Update guarantees:
// replicas "leaving at once" are serialised by the compare-and-swap, the
// loser re-running its decision on the winner's result. Copies are counted
// in the stores, not in the list.
func FuzzLeaveNeverDropsCopiesOfTheNewestBelowTheBudget(f *testing.F) {
	f.Add([]byte{1, 5, 5, 4}, []byte{0, 1, 2})
	f.Add([]byte{0, 3, 3}, []byte{0, 1})
	f.Add([]byte{2, 7, 7, 7, 1, 0}, []byte{4, 3, 0, 1, 2})
	f.Add([]byte{0x0d, 0x2e, 0x4e, 0x16, 0x0e}, []byte{0, 1, 2, 3})          // epochs 1-3, a lost report, a lagging entry
	f.Add([]byte{0x0e, 0x5f, 0x1f, 0x3f, 0x47, 0x27}, []byte{1, 2, 3, 4, 0}) // epoch 4, newer epoch with a lower number
	f.Fuzz(func(t *testing.T, worldBytes, leavers []byte) {
		w := decodeWorld(worldBytes)
		newest, before := w.newestHeld()
		budget := min(w.s.ReplicationFactor, before)
		for _, l := range leavers {
			node := nodes[int(l)%len(nodes)]
			held, ok := w.stores[node]
			if !ok {
				continue
			}
			h := Holding{Newest: held, HasData: held.Number > 0}
			h.Kept = KeepBeforeLeaving(w.s, h) // a fenced term's writes are kept aside first
			_, err := Leave(&w.s, node, h, false)
			if err != nil {
				continue
			}
			if _, still := w.s.Replica(node); still {
				t.Fatalf("Leave(%s) succeeded but the entry is still listed", node)
			}
			delete(w.stores, node) // it destroys its copy
			if _, c := w.newestHeld(); newest.Number > 0 && c < budget {
				t.Fatalf("after %s left: %d stores hold %v or newer, budget %d (rf %d): %+v", node, c, newest, budget, w.s.ReplicationFactor, w.stores)
			}
		}
	})
}

// A random sequence of promotions, demotions and reports never leaves two
// active primaries, and no epoch ever has two primaries.
func FuzzPromoteNeverMakesTwoPrimariesInOneEpoch(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{0x40, 0x81, 0xc2, 0x03, 0x44})
	f.Add([]byte{0x05, 0x00, 0x81, 0x41, 0x01, 0xc1, 0x02})
	f.Add([]byte{0x03, 0x00, 0xc0, 0xc1, 0x81, 0xc0, 0x82, 0x00}) // promote a, reports, takeover by b, by c
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := State{Volume: "v", ReplicationFactor: 2, Epoch: 0}
		if len(ops) > 0 {
			s.Epoch = Epoch(ops[0] % 7) // any epoch to start from
		}
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
			case 2:
				// a takeover by node from the primary (refused unless the
				// primary is someone else and node is ready and newest)
				if err := Takeover(&s, node, s.Primary, 1); err == nil {
					if p, ok := primaryOf[s.Epoch]; ok && p != node {
						t.Fatalf("epoch %d has primaries %s and %s", s.Epoch, p, node)
					}
					primaryOf[s.Epoch] = node
				}
			default:
				// the node reports a new snapshot of the current epoch if it
				// is the primary, else catches up to the newest
				r, _ := s.Replica(node)
				if r.Active {
					_ = Report(&s, node, Snap{Number: s.NextSnapshot(nil), Epoch: s.Epoch}, true)
				} else if n, ok := s.NewestReplica(); ok {
					_ = Report(&s, node, n.Holds(), true)
				}
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("after op %#x on %s: %v (%+v)", op, node, err, s)
			}
		}
	})
}
