package replica

import "fmt"

// fencedCopy is the rule that keeps a fenced term's writes: it names the
// copy to keep aside before a copy of the volume in epoch `epoch` loses
// `discard` (snapshots off the volume's current history) and, when
// changed, changes never snapshotted on top of `to`, or returns "" when
// nothing is kept. Every path that discards or destroys a copy asks it:
// a rollback to `to`, a replacement (to is zero: nothing stays), and a
// leave (KeepBeforeLeaving). A copy is kept when what goes may be writes
// the volume holds nowhere else:
//
//   - a snapshot of an ended epoch (older than the state's): a fenced
//     primary's history, which its successor never received. (It may
//     also be an ancestor of the newest snapshot that the peer pruned: a
//     copy kept for nothing, which costs space, never data.)
//   - changes never snapshotted on top of a snapshot of an ended epoch: a
//     fenced primary's writes since its last snapshot. The state names
//     only the current primary, so a replica restarted on a returned node
//     cannot tell that it was the primary of the ended epoch: a secondary
//     that had not yet received the new epoch's first snapshot when it
//     changed is kept too (rare, and once per snapshot it starts from).
//
// Changes on top of a snapshot of the current epoch are a secondary's
// (the current epoch's primary snapshots its own), typically access times
// that reads of a mounted secondary wrote: keeping a full copy for each
// would fill the pool, and they are no one's writes; nor are snapshots of
// the current epoch alone (ancestors of the newest that the peer pruned).
// Nothing is kept for either.
//
// The name is stable while the decision stands, so a retried rollback
// finds its copy made: the epoch it is decided in and the newest snapshot
// the copy holds (the newest discarded, else the one rolled back to). Two
// rollbacks of one epoch do not start from the same snapshot: after the
// first, the replica receives newer ones before it could diverge again.
func fencedCopy(epoch Epoch, to Snap, discard []Snap, changed bool) string {
	from, keep := to, changed && to.Epoch < epoch
	for _, s := range discard {
		if s.Epoch < epoch {
			keep = true
		}
		if s.Newer(from) {
			from = s
		}
	}
	if !keep {
		return ""
	}
	return fmt.Sprintf("fenced-e%d-%s", epoch, SnapshotName(from))
}

// KeepBeforeLeaving names the copy to keep aside before a replica's copy,
// which holds h, goes whole (a leave: SIGTERM, or the daemon's adoption
// of a surplus copy), or returns "" when nothing is kept. It is
// fencedCopy's rule for a copy that loses everything: the copy's newest
// snapshot and its ancestors are off the volume's current history unless
// the current primary's entry names that very snapshot (the current
// history passes through it; no peer listing is needed to know it), and
// changes never snapshotted on top of it go too unless the store tells
// there are none (h.Unchanged). So a node back after a takeover, whose
// copy became surplus while a new one was made elsewhere, keeps its
// fenced term's snapshots and writes before it leaves; a secondary of the
// current epoch keeps nothing.
//
// It judges on s, which may lag: Leave asks it again on the newest state
// and refuses a copy that needs keeping and was not kept (h.Kept).
func KeepBeforeLeaving(s State, h Holding) string {
	if h.Newest.Number == 0 {
		// No replication snapshot: nothing of any term (data never
		// snapshotted is never destroyed: Leave refuses it).
		return ""
	}
	var off []Snap // not known to be on the current history
	if p, ok := s.Replica(s.Primary); !ok || p.Holds() != h.Newest {
		off = []Snap{h.Newest}
	}
	return fencedCopy(s.Epoch, h.Newest, off, !h.Unchanged)
}
