package replica

import "fmt"

// DeletionVerdict is the answer of the safe-deletion rule, with its evidence.
type DeletionVerdict struct {
	Allowed bool
	// Holders are the other replicas whose snapshot is at least as new as the
	// leaving replica's: the copies that remain if it deletes.
	Holders []Node
	Reason  string
}

// holdsAtLeast reports whether r holds a copy at least as new as self's:
// a newer snapshot by (epoch, number), or the same snapshot (the same GUID,
// where both are known). A higher number of an older epoch is a fenced
// primary's diverged history, not a copy; the same number with another
// GUID is another snapshot.
func holdsAtLeast(r, self Replica) bool {
	if newerReplica(self, r) {
		return false
	}
	if newerReplica(r, self) {
		return true
	}
	return r.SnapshotGUID == self.SnapshotGUID || r.SnapshotGUID == 0 || self.SnapshotGUID == 0
}

// CanDestroy applies seed 000's safe-deletion rule for the replica on node:
// it may destroy its copy when the volume is gone (volumeGone), or when at
// least ReplicationFactor other replicas hold a snapshot at least as new as
// its own (by epoch, then number; the same snapshot by GUID), none of them
// on a fenced branch. A replica with no data (snapshot 0) may always leave.
//
// The verdict is only as good as the state it was computed on: the caller
// must remove its entry with a compare-and-swap on s.Version, re-read, and
// check again before destroying anything, so that two replicas leaving at
// once cannot both count each other.
func CanDestroy(s State, node Node, volumeGone bool) DeletionVerdict {
	if volumeGone {
		return DeletionVerdict{Allowed: true, Reason: "the volume no longer exists"}
	}
	self, ok := s.Replica(node)
	if !ok || self.Snapshot == 0 {
		return DeletionVerdict{Allowed: true, Reason: "this replica holds no data the others need"}
	}
	var holders []Node
	for _, r := range s.Replicas {
		// A copy on a fenced branch is not the volume's: its newer
		// snapshot is not a copy of self's, and it rolls back.
		if r.Node != node && !r.OnFencedBranch() && holdsAtLeast(r, self) {
			holders = append(holders, r.Node)
		}
	}
	if len(holders) >= s.ReplicationFactor {
		return DeletionVerdict{Allowed: true, Holders: holders,
			Reason: fmt.Sprintf("%d other replicas hold snapshot %d or newer (replicationFactor %d)", len(holders), self.Snapshot, s.ReplicationFactor)}
	}
	return DeletionVerdict{Holders: holders,
		Reason: fmt.Sprintf("only %d other replicas hold snapshot %d or newer, %d required", len(holders), self.Snapshot, s.ReplicationFactor)}
}

// CanDestroyOrphan applies the rule for a replica whose volume's shared
// state no longer exists. A missing object is no evidence that a user
// deleted the volume: a ReplicatedVolume deleted by hand, its finalizer
// removed, its CRD removed by an uninstall all look the same. Only Ferry's
// deletion mark is (State.Deleting: set by the controller's DeleteVolume
// alone), and markSeen says this replica saw its state carry it before
// the state went (a finalizer removed by hand during a user's deletion).
// Without the mark the copy stays, to be found again (rediscovery). With
// it, the copy goes if it is a replica's copy: one holding replication
// snapshots, or no data at all. A dataset holding data and no replication
// snapshot was never replicated (a misconfigured volume manager reaching a
// plain volume of the same name): it is not the replica's to destroy.
func CanDestroyOrphan(h Holding, markSeen bool) DeletionVerdict {
	if !markSeen {
		return DeletionVerdict{Reason: "the volume's state is gone without Ferry's deletion mark (deleted by hand, or its CRD removed): the copy is kept to be found again"}
	}
	if h.HasData && h.Newest.Number == 0 {
		return DeletionVerdict{Reason: "the volume was deleted and its state is gone, but the local dataset holds data and no replication snapshot: it was never a replica"}
	}
	return DeletionVerdict{Allowed: true, Reason: "the volume was deleted (Ferry's deletion mark) and its state is gone"}
}
