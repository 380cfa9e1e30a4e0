package replica

import (
	"fmt"
	"sort"
)

// Snap is one replication snapshot as a replica holds it. The GUID says
// which snapshot it is: the same snapshot received elsewhere keeps its
// GUID, so two replicas hold "the same ferry-5" only if the GUIDs match.
type Snap struct {
	Number SnapshotNumber
	GUID   uint64
	Epoch  Epoch
}

// Newer orders snapshots by (epoch, number): a snapshot of a later primary
// is newer than any of an earlier one, whatever their numbers (a fenced
// primary may have numbered snapshots nobody else ever saw).
func (a Snap) Newer(b Snap) bool {
	if a.Epoch != b.Epoch {
		return a.Epoch > b.Epoch
	}
	return a.Number > b.Number
}

// PlanKind is what a replica must do to hold its peer's newest snapshot.
type PlanKind int

const (
	// PlanNothing: the replica already holds the peer's newest snapshot, or
	// is ahead of the peer.
	PlanNothing PlanKind = iota
	// PlanFull: the replica holds no data; receive a full stream of Target.
	PlanFull
	// PlanIncremental: receive Base..Target on top of Base.
	PlanIncremental
	// PlanRollbackIncremental: the replica holds snapshots after Base that
	// the peer lacks, all older than Target (Discard): of an older epoch (a
	// fenced primary's writes, never the volume's), or ancestors of Target
	// the peer pruned. Roll back to Base, then receive Base..Target.
	PlanRollbackIncremental
	// PlanReplace: no snapshot in common, and everything the replica holds
	// is older than Target (see PlanRollbackIncremental): its copy is
	// discarded whole and Target received in full.
	PlanReplace
	// PlanConflict: the replica holds snapshots the peer lacks that are not
	// older than the peer's newest: the peer, not this replica, may be the
	// stale one. Nothing may be discarded; an operator (or a
	// newer peer) must settle it.
	PlanConflict
)

var planNames = [...]string{"nothing", "full", "incremental", "rollback+incremental", "replace", "conflict"}

func (k PlanKind) String() string {
	if int(k) < len(planNames) {
		return planNames[k]
	}
	return fmt.Sprintf("PlanKind(%d)", int(k))
}

// Plan is a transfer decision with its evidence.
type Plan struct {
	Kind    PlanKind
	Base    Snap   // the newest snapshot both sides hold (same number and GUID)
	Target  Snap   // the peer's newest snapshot
	Discard []Snap // local snapshots a rollback or replace throws away
	Reason  string
}

// PlanTransfer compares what the replica holds (local) with what a peer
// holds (remote) and decides how to reach the peer's newest snapshot.
// Invariants (property-tested): Base is held by both sides with the same
// GUID; nothing is discarded unless Target is newer than every discarded
// snapshot by (epoch, number); Target is never older than what is kept.
func PlanTransfer(local, remote []Snap) Plan {
	local, remote = sorted(local), sorted(remote)
	if len(remote) == 0 {
		return Plan{Kind: PlanNothing, Reason: "the peer holds no snapshot"}
	}
	target := newest(remote)
	if len(local) == 0 {
		return Plan{Kind: PlanFull, Target: target, Reason: fmt.Sprintf("no local data: full stream of %d", target.Number)}
	}
	byGUID := make(map[uint64]Snap, len(remote))
	for _, s := range remote {
		byGUID[s.GUID] = s
	}
	base, found := Snap{}, false
	for _, s := range local {
		if r, ok := byGUID[s.GUID]; ok && r.Number == s.Number && (!found || s.Newer(base)) {
			base, found = s, true
		}
	}
	if !found {
		if olderThan(local, target) {
			return Plan{Kind: PlanReplace, Target: target, Discard: local,
				Reason: fmt.Sprintf("no snapshot in common and every local one is older than %d of epoch %d: replace the copy", target.Number, target.Epoch)}
		}
		return Plan{Kind: PlanConflict, Target: target,
			Reason: "no snapshot in common, and the local copy holds snapshots as new as the peer's"}
	}
	var after []Snap
	for _, s := range local {
		if s.Newer(base) {
			after = append(after, s)
		}
	}
	switch {
	case base.GUID == target.GUID && len(after) == 0:
		return Plan{Kind: PlanNothing, Base: base, Target: target, Reason: fmt.Sprintf("already at %d", target.Number)}
	case base.GUID == target.GUID:
		return Plan{Kind: PlanNothing, Base: base, Target: target, Reason: "ahead of the peer"}
	case len(after) == 0:
		return Plan{Kind: PlanIncremental, Base: base, Target: target,
			Reason: fmt.Sprintf("incremental %d..%d", base.Number, target.Number)}
	case olderThan(after, target):
		return Plan{Kind: PlanRollbackIncremental, Base: base, Target: target, Discard: after,
			Reason: fmt.Sprintf("holds %d snapshot(s) after %d that the peer lacks, all older than %d of epoch %d: roll back to %d", len(after), base.Number, target.Number, target.Epoch, base.Number)}
	default:
		return Plan{Kind: PlanConflict, Base: base, Target: target, Discard: nil,
			Reason: fmt.Sprintf("diverged after %d with snapshots as new as the peer's epoch %d", base.Number, target.Epoch)}
	}
}

// olderThan reports whether t is newer than every snapshot, by (epoch,
// number). A snapshot of an older epoch is a fenced primary's history; one
// of t's own epoch with a lower number is an ancestor of t (an epoch has a
// single primary, which snapshots in order), so discarding it loses
// nothing t does not hold (the sender may have pruned it after this
// replica received it).
func olderThan(snaps []Snap, t Snap) bool {
	for _, s := range snaps {
		if !t.Newer(s) {
			return false
		}
	}
	return true
}

func sorted(s []Snap) []Snap {
	out := append([]Snap(nil), s...)
	sort.Slice(out, func(i, j int) bool { return out[j].Newer(out[i]) })
	return out
}

func newest(s []Snap) Snap {
	n := s[0]
	for _, x := range s[1:] {
		if x.Newer(n) {
			n = x
		}
	}
	return n
}
