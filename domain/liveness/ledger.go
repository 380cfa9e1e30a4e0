package liveness

import (
	"slices"
	"strings"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// Ledger is a node's own record of the takers it acknowledged, volume by
// volume, for the terms it is the primary of: the nodes its guard must
// hear a promise from before its primaries write on without a lease.
//
// The takeover rule rests on it (ARCHITECTURE 5.8): only a replica the
// primary acknowledged may take a volume over (replica.Takeover refuses
// the others), and the primary records a taker here (Intend) before the
// compare-and-swap that acknowledges it (replica.Acknowledge) is sent.
// So every node that may ever take a volume over from this node is in
// this ledger, whatever this node's view of the shared state shows: a
// copy that finished its first sync during a cut, a replication factor
// raised meanwhile, a promotion the view never showed. None of them can
// take over without this node having asked it for a promise first.
//
// The ledger only grows within a term. It forgets a term only on a state
// showing the term over (a later epoch, or this node no longer active in
// it), which no stale view can show early: a term's end is written after
// its acknowledgements.
type Ledger struct {
	self  replica.Node
	terms map[volume.ID]Term
}

// Term is one volume's acknowledged takers in the epoch this node is its
// primary of.
type Term struct {
	Volume volume.ID
	Epoch  replica.Epoch
	Takers []replica.Node
}

// NewLedger returns node self's empty ledger.
func NewLedger(self replica.Node) *Ledger {
	return &Ledger{self: self, terms: map[volume.ID]Term{}}
}

// Intend records, before the compare-and-swap that stores them, takers
// as acknowledged for volume id in epoch. An older epoch is ignored.
func (l *Ledger) Intend(id volume.ID, epoch replica.Epoch, takers []replica.Node) {
	t, ok := l.terms[id]
	switch {
	case ok && epoch < t.Epoch:
		return
	case !ok || epoch > t.Epoch:
		t = Term{Volume: id, Epoch: epoch}
	}
	for _, n := range takers {
		if n != l.self && !slices.Contains(t.Takers, n) {
			t.Takers = append(t.Takers, n)
		}
	}
	slices.Sort(t.Takers)
	l.terms[id] = t
}

// Learn folds in a state read from anywhere, however old: a term of this
// node's seen active adds the takers the state flags (stored by this
// node's own earlier acknowledgements, maybe by a process of it that
// restarted since); a state showing the ledger's term over (a later
// epoch, or the same epoch with this node no longer active) forgets it.
// An older state changes nothing.
func (l *Ledger) Learn(s replica.State) {
	t, known := l.terms[s.Volume]
	if known && s.Epoch < t.Epoch {
		return
	}
	self, listed := s.Replica(l.self)
	if listed && self.Active && s.Primary == l.self {
		var flagged []replica.Node
		for _, r := range s.Replicas {
			if r.Taker {
				flagged = append(flagged, r.Node)
			}
		}
		if len(flagged) > 0 || known {
			l.Intend(s.Volume, s.Epoch, flagged)
		}
		return
	}
	if known {
		delete(l.terms, s.Volume) // the term is over: a later epoch, or stepped down
	}
}

// Forget drops volume id (its state is gone: the volume was deleted).
func (l *Ledger) Forget(id volume.ID) { delete(l.terms, id) }

// Takers are the takers acknowledged for volume id's current term here.
func (l *Ledger) Takers(id volume.ID) []replica.Node {
	return slices.Clone(l.terms[id].Takers)
}

// Terms lists every term with at least one taker, by volume: the volumes
// whose primary here needs its lease, or every taker's promise, to write.
func (l *Ledger) Terms() []Term {
	var out []Term
	for _, t := range l.terms {
		if len(t.Takers) > 0 {
			t.Takers = slices.Clone(t.Takers)
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Term) int { return strings.Compare(string(a.Volume), string(b.Volume)) })
	return out
}

// AllTakers is every node some term here acknowledged, sorted: the nodes
// to ask for promises.
func (l *Ledger) AllTakers() []replica.Node {
	var out []replica.Node
	for _, t := range l.terms {
		for _, n := range t.Takers {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}
