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
// that the term it was decided in ended and its peer is not the new
// term's primary (TermEnded): whatever the peer sends is of an ended
// term, and the machine plans again from the new one (as the new primary
// itself, or fetching from it). Stopping it is no failure of the peer's:
// no back-off, the peer is not avoided (ErrTermEnded).

// ErrTermEnded: a peer action was stopped because the shared state shows
// a newer term whose primary is not that peer (TermEnded).
var ErrTermEnded = errors.New("the term the action was decided in ended: a peer action stopped")

// TermEnded says whether a peer action with peer, decided on a view of
// term epoch, is to stop now that st was read: a newer term began and
// peer is not its primary. A term that goes on (the same epoch), or a
// newer one whose primary is the peer, lets the action finish.
func TermEnded(peer Node, epoch Epoch, st State) bool {
	return st.Epoch > epoch && st.Primary != peer
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
