package replica

import "errors"

// Errors of the rules that change the state.
var (
	// ErrUnsafe: the change would leave fewer copies than the rules allow.
	ErrUnsafe = errors.New("unsafe: not enough up-to-date replicas")
	// ErrPrimaryActive: another replica is the active primary.
	ErrPrimaryActive = errors.New("another replica is the active primary")
	// ErrBehind: the replica does not hold the newest snapshot.
	ErrBehind = errors.New("replica is behind the newest snapshot")
	// ErrRediscovering: the state was rebuilt from the copies and still
	// awaits nodes that may hold a newer one (State.Awaiting).
	ErrRediscovering = errors.New("the volume's state was rebuilt and awaits nodes that may hold a copy")
	// ErrUnknownReplica: the node has no entry in the replica list.
	ErrUnknownReplica = errors.New("no replica on that node")
	// ErrFenced: the replica acts for an epoch that has ended.
	ErrFenced = errors.New("fenced: a newer primary has taken over")
	// ErrNotTaker: the primary never acknowledged this replica as one that
	// may take its volume over (Acknowledge); it waits.
	ErrNotTaker = errors.New("not acknowledged by the primary as a taker")
	// ErrStaleView: a decision rested on a view of the shared state that
	// the newest one contradicts; re-read it and decide again.
	ErrStaleView = errors.New("decided on a stale view of the shared state")
	// ErrModified: an incremental receive found the replica's dataset
	// changed since its newest snapshot (the store refuses to apply over
	// changes); the caller wraps the store's error with it.
	ErrModified = errors.New("the dataset changed since its newest snapshot")
	// ErrPartialKept: a transfer failed but the store kept its partial
	// state to resume it (OpenZFS): the fetch target stays recorded, so
	// that the snapshot the resume token names is kept at the sender.
	ErrPartialKept = errors.New("partial receive kept to be resumed")
	// ErrUnchanged: a periodic snapshot was skipped, the pool telling that
	// nothing was written since the newest one.
	ErrUnchanged = errors.New("nothing written since the newest snapshot")
)

// newerReplica orders replicas by their newest snapshot, (epoch, number).
func newerReplica(a, b Replica) bool {
	return Snap{Number: a.Snapshot, Epoch: a.SnapshotEpoch}.Newer(Snap{Number: b.Snapshot, Epoch: b.SnapshotEpoch})
}

// NewestReplica is the replica holding the newest snapshot; ties go to the
// lowest node name, so every node computes the same answer. A copy on a
// fenced branch is not counted: what it holds beyond its fork was given up.
func (s *State) NewestReplica() (Replica, bool) {
	var best Replica
	found := false
	for _, r := range s.Replicas { // sorted by node: the first of equals wins
		if r.Snapshot == 0 || r.OnFencedBranch() {
			continue
		}
		if !found || newerReplica(r, best) {
			best, found = r, true
		}
	}
	return best, found
}

// ChooseSource picks the peer a replica on self should fetch from: the
// newest replica other than itself, if it is newer than self. Ties are
// broken by node name, skipping the nodes in avoid (peers whose listing
// or transfer just failed): the next replica as new as the best is tried
// instead of waiting for one that is down. An older replica is never
// chosen over the best: its copy may be about to be rolled back or
// replaced, and what it holds is stale anyway. When every replica as new
// as the best is avoided, the best is chosen again (the caller's back-off
// spaces the retries). The primary is also chosen when it is at self's
// number and epoch with another GUID, so that the divergence is planned
// (and raised) rather than unseen. A replica on a fenced branch is never
// a source: what it holds beyond its fork was given up, and once the
// primary that took over is gone from the list, State.Fenced no longer
// tells it.
func ChooseSource(s State, self Node, avoid map[Node]bool) (Replica, bool) {
	me, _ := s.Replica(self)
	var best, alt Replica
	found, altFound := false, false
	for _, r := range s.Replicas {
		diverged := r.Node == s.Primary && me.Snapshot != 0 && r.Snapshot == me.Snapshot &&
			r.SnapshotEpoch == me.SnapshotEpoch && r.SnapshotGUID != me.SnapshotGUID
		if r.Node == self || r.Snapshot == 0 || s.Fenced(r.Holds()) || r.OnFencedBranch() || (!newerReplica(r, me) && !diverged) {
			continue
		}
		if !found || newerReplica(r, best) {
			best, found = r, true
		}
	}
	if !found || !avoid[best.Node] {
		return best, found
	}
	for _, r := range s.Replicas {
		if r.Node != self && !avoid[r.Node] && !r.OnFencedBranch() && r.Holds() == best.Holds() && !altFound {
			alt, altFound = r, true
		}
	}
	if altFound {
		return alt, true
	}
	return best, true
}

// Fenced reports whether snap is a fenced primary's history: a snapshot of
// an ended epoch that is newer than what the current primary held when its
// epoch began (its entry, until it snapshots in its own epoch). Such a
// snapshot is rolled back wherever it is; it is never a fetch target.
func (s *State) Fenced(snap Snap) bool {
	if snap.Epoch >= s.Epoch || s.Primary == "" {
		return false
	}
	p, ok := s.Replica(s.Primary)
	return ok && snap.Newer(p.Holds())
}

// IsReady says whether replica r (as it is now, which may be newer than
// its entry in s) is close enough to the newest snapshot to take over: the
// same epoch as the newest and at most lag snapshots behind. A replica of
// an older epoch is never ready: its snapshots may have diverged. Nor is
// a copy on a fenced branch, and such a copy does not count as the newest.
func IsReady(s State, r Replica, lag uint64) bool {
	if r.OnFencedBranch() || len(s.Awaiting) > 0 {
		return false // a rebuilt state's newest copy may not be listed yet
	}
	n := r
	for _, o := range s.Replicas {
		if o.Node != r.Node && !o.OnFencedBranch() && newerReplica(o, n) {
			n = o
		}
	}
	return r.SnapshotEpoch == n.SnapshotEpoch && uint64(r.Snapshot)+lag >= uint64(n.Snapshot)
}

// NextSnapshot is the number the primary gives its next snapshot: above
// every number any replica reported or is fetching, and every number the
// primary's own store holds (a snapshot it received but whose report was
// lost), so numbers never repeat in a volume.
func (s *State) NextSnapshot(local []Snap) SnapshotNumber {
	var n SnapshotNumber
	for _, r := range s.Replicas {
		n = max(n, r.Snapshot, r.Fetching.Number)
	}
	for _, l := range local {
		n = max(n, l.Number)
	}
	return n + 1
}
