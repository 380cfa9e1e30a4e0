package replica

import "errors"

// A peer action (a listing, a transfer) talks to another node's replica,
// and may wait long on it: a node cut off or paused answers nothing, and
// only the transport's own liveness checks (tens of seconds) end the
// wait. The action holds the replica's one decision loop meanwhile, and
// with it everything the loop must do next: after a takeover, the publish
// on the survivor waits for its replica to become the primary, which its
// loop decides only once the transfer from the lost primary ends.
//
// Such an action is therefore stopped as soon as the shared state shows
// that a takeover ended the peer's term (TermEnded): the peer's node was
// judged lost, whatever it sends is of a branch given up, and the machine
// plans again from the new term (as the new primary itself, or fetching
// from it). Stopping it is no failure of the peer's: no back-off, the
// peer is not avoided (ErrTermEnded). A planned handover (the peer
// stepped down, another replica was promoted) stops nothing: the peer is
// alive, and what it sends is on the volume's line.

// ErrTermEnded: a peer action was stopped because the shared state shows
// a newer term whose primary is not that peer (TermEnded).
var ErrTermEnded = errors.New("the term the action was decided in ended: a peer action stopped")

// TermEnded says whether a peer action with peer, decided on a view of
// term epoch, is to stop now that st was read: a newer term began, peer
// is not its primary, and a takeover after epoch forked the peer off the
// volume's line (Replica.Forked), or the peer is no longer listed. A
// term that goes on, a newer one whose primary is the peer, and a
// planned handover (a promotion after the peer stepped down) let the
// action finish.
func TermEnded(peer Node, epoch Epoch, st State) bool {
	if st.Epoch <= epoch || st.Primary == peer {
		return false
	}
	r, ok := st.Replica(peer)
	return !ok || r.Forked.Epoch > epoch
}

// PeerOf names the node a peer action talks to; false for an action that
// talks to none.
func PeerOf(a Action) (Node, bool) {
	switch a := a.(type) {
	case ReadPeer:
		return a.Peer, true
	case Fetch:
		return a.Peer, true
	case Replace:
		return a.Peer, true
	}
	return "", false
}

// Term is the epoch of the view the machine decides on (its last
// Observed state): a peer action it decides is of this term.
func (m *Machine) Term() Epoch { return m.state.Epoch }
