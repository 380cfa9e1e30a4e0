package replica

import (
	"fmt"
	"slices"
)

// Copies gone for good. A node's entry stays listed while its copy may
// come back: a node cut off, stopped or rebooting keeps its pool, and its
// copy rejoins (or leaves as surplus) when its daemon runs again. Two
// things say the copy will not come back, and only they retire the entry:
//
//   - Gone: the node's object was deleted: an operator said the node is
//     gone for good (the documented procedure to replace a node).
//   - Empty: the node's own daemon read its pool, the pool answered, and
//     it holds no dataset of the volume while no volume manager of the
//     volume runs there: the node came back with a new, empty pool.
//
// A retired entry is no copy: it no longer counts for the safe-deletion
// rule, a promotion no longer waits for what it held (Promote refuses a
// replica behind the newest listed), and the volume's ReplicaSet, whose
// pod on the node is gone, places a new copy elsewhere.
type Departure int

const (
	// Gone: the node's object was deleted.
	Gone Departure = iota + 1
	// Empty: the node's pool holds no copy and no volume manager runs
	// for it there.
	Empty
)

func (d Departure) String() string {
	switch d {
	case Gone:
		return "its node was deleted"
	case Empty:
		return "its node's pool holds no copy of the volume"
	}
	return fmt.Sprintf("departure(%d)", int(d))
}

// Retire removes node's entry from s: its copy is gone for good (why).
// It reports whether s changed. The active primary is never retired (its
// pod may still be writing the only current copy): a takeover ends its
// term first (liveness), then the entry goes. A retired primary of the
// epoch that is not active leaves the volume with no primary: the next
// read/write publish promotes a listed copy, and with the primary go the
// takers it acknowledged. An awaited node is awaited no more (Forget).
func Retire(s *State, node Node, why Departure) (bool, error) {
	changed := slices.Contains(s.Awaiting, node)
	Forget(s, node)
	i := s.index(node)
	if i < 0 {
		return changed, nil
	}
	if s.Replicas[i].Active {
		return changed, fmt.Errorf("retire %s (%s): it is the active primary of epoch %d: a takeover ends its term first: %w", node, why, s.Epoch, ErrUnsafe)
	}
	s.Replicas = append(s.Replicas[:i], s.Replicas[i+1:]...)
	if s.Primary == node {
		s.Primary = ""
		clearTakers(s)
	}
	return true, nil
}

// Retirees are the listed nodes of s, other than self, whose object is
// deleted (exists answers false): the entries Gone retires.
func Retirees(s State, self Node, exists func(Node) bool) []Node {
	var out []Node
	for _, r := range s.Replicas {
		if r.Node != self && !exists(r.Node) {
			out = append(out, r.Node)
		}
	}
	for _, n := range s.Awaiting {
		if n != self && !exists(n) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// EmptyHere reports whether self's entry in s is one Empty retires: listed,
// not the active primary, while its pool answered that it holds no copy
// (copyHere false) and no volume manager of the volume runs on the node
// (managerHere false: a new replica's joins before its first receive
// makes the copy).
func EmptyHere(s State, self Node, copyHere, managerHere bool) bool {
	r, listed := s.Replica(self)
	return listed && !r.Active && !copyHere && !managerHere
}
