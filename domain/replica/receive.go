package replica

import (
	"errors"
	"slices"
)

// What a volume manager decides around a transfer and a discard, beside
// the machine's actions: the machine says what to do, these say what an
// outcome means (the volume manager reads the pool, asks, and carries the
// verdict out).

// ErrSnapshotGone reports a rollback to a snapshot the copy no longer lists.
var ErrSnapshotGone = errors.New("the snapshot is not in the copy")

// StoredSnapshot is a snapshot of the local copy as its pool lists it:
// its name and the transaction group that created it (their order).
type StoredSnapshot struct {
	Name string
	Txg  uint64
}

// ForeignAfter names the snapshots a discard would destroy that are not
// Ferry's replication snapshots (a CSI VolumeSnapshot a former primary
// took): those created after the snapshot named after, for a rollback to
// it, or every one, when the whole copy would go (after == ""). A snapshot
// named in except is not counted (one Ferry makes for a moment: a copy
// kept aside). Any name returned holds the discard back: only an operator
// (or the snapshot's deletion) settles it. ErrSnapshotGone when after is
// not listed.
func ForeignAfter(list []StoredSnapshot, after string, except ...string) ([]string, error) {
	var since uint64
	if after != "" {
		i := slices.IndexFunc(list, func(s StoredSnapshot) bool { return s.Name == after })
		if i < 0 {
			return nil, ErrSnapshotGone
		}
		since = list[i].Txg
	}
	var foreign []string
	for _, s := range list {
		if _, _, ok := ParseSnapshotName(s.Name); !ok && (after == "" || s.Txg > since) && !slices.Contains(except, s.Name) {
			foreign = append(foreign, s.Name)
		}
	}
	return foreign, nil
}

// HoldersRemain is the last check of the safe-deletion protocol, after
// the leave's compare-and-swap and before the copy is destroyed: the fresh
// state st still lists at least its replication factor of the holders the
// leave counted on (DeletionVerdict.Holders). still is how many it lists.
func HoldersRemain(st State, holders []Node) (ok bool, still int) {
	for _, h := range holders {
		if _, listed := st.Replica(h); listed {
			still++
		}
	}
	return still >= st.ReplicationFactor, still
}

// FetchFailure is what a volume manager knows of a fetch that failed.
type FetchFailure struct {
	// Opening: the peer's stream did not open; else the receive failed.
	Opening bool
	// Resumed: the fetch resumed an interrupted receive (a resume token).
	Resumed bool
	// Incremental: the fetch was on top of a base snapshot.
	Incremental bool
	// PeerCannotResume: opening, the peer refused the resume token (the
	// snapshot gone, the token stale).
	PeerCannotResume bool
	// Conflict: the receive found the copy changed since its newest
	// snapshot (or that snapshot not the stream's base: BaseMismatch).
	Conflict bool
	// BaseMismatch: the stream's base is not the copy's newest snapshot.
	BaseMismatch bool
	// Bytes received before the failure; Cancelled: the fetch's own
	// context ended (a stop, not the peer).
	Bytes     int64
	Cancelled bool
	// PartialKept: the store kept the partial receive to resume it.
	PartialKept bool
	// NoSpace: the receive ran out of space in this replica's pool.
	NoSpace bool
}

// FetchVerdict is what a failed fetch means.
type FetchVerdict struct {
	// Modified: the machine decides whether the copy's changes since its
	// newest snapshot are snapshotted or discarded (ErrModified).
	Modified bool
	// CheckForeign: a snapshot after the base may be one that is not
	// Ferry's, which only an operator can settle (ForeignAfter the base);
	// else the plan was stale and is made again.
	CheckForeign bool
	// DiscardPartial: the interrupted receive cannot be resumed; the next
	// fetch starts over from the last complete snapshot.
	DiscardPartial bool
	// KeepTarget: the partial receive is kept to be resumed, so the fetch
	// target stays recorded (ErrPartialKept).
	KeepTarget bool
}

// OnFetchFailure decides what a failed fetch means. A resumed fetch that
// the peer cannot resume, or whose peer sent nothing (its zfs send -t
// failed before a byte: the snapshot gone), gives the partial receive up;
// an incremental receive that conflicts is a modified copy (unless the
// base is not the newest snapshot here: a stale plan, or a foreign
// snapshot after it); whatever the store kept to resume keeps the target,
// unless the pool is full: a partial copy is never left filling a pool
// that the node's other volumes (its primaries among them) write to, and
// a resume into a full pool would fail again.
func OnFetchFailure(f FetchFailure) FetchVerdict {
	if f.Opening {
		return FetchVerdict{DiscardPartial: f.Resumed && f.PeerCannotResume}
	}
	if f.Conflict && f.Incremental && !f.BaseMismatch {
		return FetchVerdict{Modified: true}
	}
	v := FetchVerdict{CheckForeign: f.BaseMismatch && f.Incremental}
	if f.Resumed && f.Bytes == 0 && !f.Cancelled || f.NoSpace && f.PartialKept {
		v.DiscardPartial = true
		return v
	}
	v.KeepTarget = f.PartialKept
	return v
}
