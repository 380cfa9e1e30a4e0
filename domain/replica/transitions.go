package replica

import (
	"fmt"
	"sort"
)

// The functions below are the only ways the replica list changes. Each is
// meant to run inside ClusterState.Update, so it sees the newest state and
// its result is written only if nobody wrote in between.

// Join adds node to the list with no data (snapshot 0), if it is not there.
func Join(s *State, node Node) {
	if _, ok := s.Replica(node); ok {
		return
	}
	s.Replicas = append(s.Replicas, Replica{Node: node})
	sort.Slice(s.Replicas, func(i, j int) bool { return s.Replicas[i].Node < s.Replicas[j].Node })
}

// Report records the newest snapshot node holds, as the replica read it
// from its store (it goes backwards before a rollback: the list says at
// most what is, never more). A snapshot from an epoch after the volume's
// is impossible and refused. The fetch target is cleared once the
// reported snapshot is at least as new as it. A replica on a fenced
// branch (Replica.OnFencedBranch) is never recorded ready; its fork is
// forgotten once it reports a snapshot of the takeover's epoch or later,
// or no snapshot at all. A replica other than the primary that reports a
// fenced primary's history (State.Fenced) is put on the branch the
// takeover left (Forked at the current primary's snapshot).
func Report(s *State, node Node, snap Snap, ready bool) error {
	i := s.index(node)
	if i < 0 {
		return fmt.Errorf("report from %s: %w", node, ErrUnknownReplica)
	}
	if snap.Epoch > s.Epoch {
		return fmt.Errorf("report from %s: snapshot %d of epoch %d is after the volume's epoch %d", node, snap.Number, snap.Epoch, s.Epoch)
	}
	r := &s.Replicas[i]
	if r.Snapshot != snap.Number || r.SnapshotEpoch != snap.Epoch || r.SnapshotGUID != snap.GUID {
		r.SnapshotTaken = 0 // said of the snapshot held before
	}
	r.Snapshot, r.SnapshotEpoch, r.SnapshotGUID, r.Ready = snap.Number, snap.Epoch, snap.GUID, ready
	if snap.Number == 0 {
		r.SnapshotEpoch, r.SnapshotGUID = 0, 0
	}
	if r.Fetching.Number != 0 && !r.Fetching.Newer(snap) {
		r.Fetching = Snap{}
	}
	if r.Forked.Epoch != 0 && !r.OnFencedBranch() {
		r.Forked = Fork{}
	}
	if p, ok := s.Replica(s.Primary); ok && node != s.Primary && r.Forked.Epoch == 0 && p.Snapshot != 0 && s.Fenced(snap) {
		// A fenced primary's history reported by another replica: one
		// that fetched it from that primary on a stale view (both cut off
		// from the shared state, 5.6), or whose report came after the
		// takeover. Its copy is on the branch the takeover left, as the
		// fenced primary's is: never ready, a source, a successor, nor
		// counted as newer, until it reports a snapshot of this epoch or
		// later (after its rollback, which keeps the branch aside first).
		r.Forked = Fork{Epoch: s.Epoch, At: p.Holds()}
	}
	if r.OnFencedBranch() {
		r.Ready = false
	}
	return nil
}

// Stamp records when node's snapshot snap was taken (Unix seconds), if
// snap is still the one its entry holds: a time is never paired with
// another snapshot. For operators only (Replica.SnapshotTaken).
func Stamp(s *State, node Node, snap Snap, taken int64) {
	i := s.index(node)
	if i < 0 || taken <= 0 {
		return
	}
	r := &s.Replicas[i]
	if r.Snapshot == snap.Number && r.SnapshotEpoch == snap.Epoch && r.SnapshotGUID == snap.GUID && snap.Number != 0 {
		r.SnapshotTaken = taken
	}
}

// ClearFetch forgets node's fetch target after its transfer failed and
// left nothing received (no resumable state): it no longer needs keeping,
// and it must not block a takeover. A target recorded since is kept.
func ClearFetch(s *State, node Node, target Snap) error {
	i := s.index(node)
	if i < 0 {
		return nil // left: nothing recorded
	}
	if f := s.Replicas[i].Fetching; f.Number == target.Number && f.Epoch == target.Epoch {
		s.Replicas[i].Fetching = Snap{}
	}
	return nil
}

// RecordFetch records, before a transfer starts, the snapshot node is
// about to receive, so that no replica's retention destroys it until node
// reports it (or something newer) or leaves.
func RecordFetch(s *State, node Node, target Snap) error {
	i := s.index(node)
	if i < 0 {
		return fmt.Errorf("fetch by %s: %w", node, ErrUnknownReplica)
	}
	if target.Number == 0 || target.Epoch == 0 || target.Epoch > s.Epoch {
		return fmt.Errorf("fetch by %s: snapshot %d of epoch %d cannot be a target (volume epoch %d)", node, target.Number, target.Epoch, s.Epoch)
	}
	s.Replicas[i].Fetching = Snap{Number: target.Number, Epoch: target.Epoch, GUID: target.GUID}
	return nil
}

// Promote makes node the single active primary of a new epoch. It must
// hold the newest snapshot, no other replica may be active, and its copy
// may not be on a fenced branch (Replica.OnFencedBranch).
func Promote(s *State, node Node) error {
	i := s.index(node)
	if i < 0 {
		return fmt.Errorf("promote %s: %w", node, ErrUnknownReplica)
	}
	for _, r := range s.Replicas {
		if r.Active && r.Node != node {
			return fmt.Errorf("promote %s: %s is active in epoch %d: %w", node, r.Node, s.Epoch, ErrPrimaryActive)
		}
	}
	if len(s.Awaiting) > 0 {
		return fmt.Errorf("promote %s: %v not heard from yet: %w", node, s.Awaiting, ErrRediscovering)
	}
	if s.Replicas[i].Active && s.Primary == node {
		return nil // already the active primary: publishing again is a no-op
	}
	if r := s.Replicas[i]; r.OnFencedBranch() {
		return fmt.Errorf("promote %s: its copy is on the branch a takeover of epoch %d left (it may hold writes the volume gave up): %w", node, r.Forked.Epoch, ErrFenced)
	}
	if n, ok := s.NewestReplica(); ok && newerReplica(n, s.Replicas[i]) {
		return fmt.Errorf("promote %s: holds %d of epoch %d, newest is %d of epoch %d on %s: %w",
			node, s.Replicas[i].Snapshot, s.Replicas[i].SnapshotEpoch, n.Snapshot, n.SnapshotEpoch, n.Node, ErrBehind)
	}
	s.Epoch++
	s.Primary = node
	s.Replicas[i].Active = true
	clearTakers(s)
	return nil
}

// clearTakers starts a new epoch's acknowledgements: the new primary's
// guard acknowledges its own takers (Acknowledge).
func clearTakers(s *State) {
	for i := range s.Replicas {
		s.Replicas[i].Taker = false
	}
}

// Candidates are the replicas the active primary node should acknowledge
// as takers in s and has not yet: every other listed replica holding a
// snapshot, but one on a fenced branch (it may not take over until it
// resynced; acknowledged, it would only be asked for promises). None when
// node is not the active primary.
func Candidates(s State, node Node) []Node {
	if p, ok := s.Replica(node); !ok || !p.Active || s.Primary != node {
		return nil
	}
	var out []Node
	for _, r := range s.Replicas {
		if r.Node != node && r.Snapshot != 0 && !r.Taker && !r.OnFencedBranch() {
			out = append(out, r.Node)
		}
	}
	return out
}

// Acknowledge records that primary, the active primary of epoch, knows
// the listed replicas of takers as nodes that may take its volume over:
// its guard asks each for a promise before writing on without a lease.
// The caller must have made that so before this compare-and-swap is
// written (the guard records them first), since a replica becomes a
// possible successor (Takeover) the moment its flag is stored. Nodes not
// listed, and primary itself, are ignored. Refused (ErrFenced) when
// primary is not the active primary of epoch: a term that ended
// acknowledges nothing.
func Acknowledge(s *State, primary Node, epoch Epoch, takers []Node) error {
	p, ok := s.Replica(primary)
	if !ok || !p.Active || s.Primary != primary || s.Epoch != epoch {
		return fmt.Errorf("acknowledge takers as %s of epoch %d: the volume is at epoch %d with primary %q: %w", primary, epoch, s.Epoch, s.Primary, ErrFenced)
	}
	for _, t := range takers {
		if i := s.index(t); i >= 0 && t != primary {
			s.Replicas[i].Taker = true
		}
	}
	return nil
}

// Resume records, by compare-and-swap before any pod writes again, that
// node, the active primary of epoch, resumes writing after its fence (or
// publishes a pod anew): a takeover decided before, on a lease verdict
// this node has since outlived, is then refused (liveness.ResumedSince).
// Refused (ErrFenced) when node is no longer the active primary of epoch:
// the term was taken over, and nothing here may write again.
func Resume(s *State, node Node, epoch Epoch) error {
	i := s.index(node)
	if i < 0 || !s.Replicas[i].Active || s.Primary != node || s.Epoch != epoch {
		return fmt.Errorf("resume as %s of epoch %d: the volume is at epoch %d with primary %q: %w", node, epoch, s.Epoch, s.Primary, ErrFenced)
	}
	s.Replicas[i].Resumed++
	return nil
}

// Demote ends node's term as the active primary of epoch, recording its
// final snapshot (taken after the last write, before this call) in the
// same compare-and-swap: no other replica can be promoted before it holds
// that snapshot, so a handover never loses the last writes.
//
// It runs on the newest state, so it also settles a release decided on a
// view that lagged: epoch 0 asks only to confirm that node is not the
// active primary (nil if so); a node that is the active primary of
// another epoch than the one its final snapshot was taken in, or that
// asks to confirm while active, gets ErrStaleView (re-read, decide
// again); a primary that is no longer the volume's is fenced (ErrFenced).
// Demoting a node that is already inactive is a no-op.
func Demote(s *State, node Node, epoch Epoch, final Snap) error {
	i := s.index(node)
	active := i >= 0 && s.Replicas[i].Active && s.Primary == node
	switch {
	case epoch == 0 && active:
		return fmt.Errorf("%s is the active primary of epoch %d: %w", node, s.Epoch, ErrStaleView)
	case epoch == 0:
		return nil
	case s.Primary != node:
		return fmt.Errorf("demote %s of epoch %d: volume is at epoch %d with primary %q: %w", node, epoch, s.Epoch, s.Primary, ErrFenced)
	case s.Epoch != epoch && active:
		return fmt.Errorf("demote %s: its final snapshot is of epoch %d, it is the primary of epoch %d: %w", node, epoch, s.Epoch, ErrStaleView)
	case s.Epoch != epoch:
		return fmt.Errorf("demote %s of epoch %d: volume is at epoch %d: %w", node, epoch, s.Epoch, ErrFenced)
	case !active:
		return nil
	}
	if final.Number == 0 || final.Epoch != epoch {
		return fmt.Errorf("demote %s of epoch %d: the final snapshot %d of epoch %d is not of its term: %w", node, epoch, final.Number, final.Epoch, ErrStaleView)
	}
	if err := Report(s, node, final, true); err != nil {
		return err
	}
	s.Replicas[i].Active = false
	return nil
}

// Holding is what a replica's store really holds: its newest replication
// snapshot, and whether it holds a dataset at all (a dataset without any
// replication snapshot may hold writes never snapshotted).
type Holding struct {
	Newest  Snap
	HasData bool
	// Unchanged: the store tells that nothing was written since Newest
	// (OpenZFS: written=0). False when something was, or when it cannot
	// tell (zfs-fuse).
	Unchanged bool
	// Kept names the copy kept aside before the leave (SnapshotStore.
	// KeepAside, as KeepBeforeLeaving named it); "" when none was made.
	Kept string
}

// Leave removes node from the list if the safe-deletion rule allows it,
// and returns the verdict; a refused verdict is ErrUnsafe. The rule is
// applied to what the replica's store holds, not to its entry, which may
// lag (a snapshot received but not yet reported is data only this replica
// may hold). Run inside ClusterState.Update: of two replicas leaving at
// once, the second sees the first gone and is counted against the smaller
// list.
//
// volumeGone is honoured only on a state being deleted (State.Deleting):
// a replica that believes its volume deleted while the state says
// otherwise is held to the safe-deletion rule. The active primary may
// leave only a volume being deleted.
//
// A copy that may hold a fenced term's writes (KeepBeforeLeaving, judged
// here on the newest state, since the leave may have been decided on one
// that lagged) leaves only once it was kept aside (holds.Kept), unless
// the volume is being deleted.
func Leave(s *State, node Node, holds Holding, volumeGone bool) (DeletionVerdict, error) {
	volumeGone = volumeGone && s.Deleting
	if !volumeGone && len(s.Awaiting) > 0 && holds.HasData {
		v := DeletionVerdict{Reason: fmt.Sprintf("the volume's state was rebuilt and awaits %v, which may hold newer copies: no copy is surplus yet", s.Awaiting)}
		return v, fmt.Errorf("%s may not delete its copy: %s: %w", node, v.Reason, ErrUnsafe)
	}
	if !volumeGone && holds.HasData && holds.Newest.Number == 0 {
		v := DeletionVerdict{Reason: "it holds data that was never snapshotted"}
		return v, fmt.Errorf("%s may not delete its copy: %s: %w", node, v.Reason, ErrUnsafe)
	}
	if k := KeepBeforeLeaving(*s, holds); !volumeGone && holds.Kept == "" && k != "" {
		v := DeletionVerdict{Reason: fmt.Sprintf("it may hold a fenced term's writes (%s and what was written after it, of epoch %d, which ended): they must be kept aside as %s first",
			SnapshotName(holds.Newest), holds.Newest.Epoch, k)}
		return v, fmt.Errorf("%s may not delete its copy: %s: %w", node, v.Reason, ErrUnsafe)
	}
	probe := *s
	probe.Replicas = append([]Replica(nil), s.Replicas...)
	if holds.Newest.Number > 0 {
		Join(&probe, node)
		i := probe.index(node)
		own := probe.Replicas[i]
		if !newerReplica(own, Replica{Snapshot: holds.Newest.Number, SnapshotEpoch: holds.Newest.Epoch}) {
			probe.Replicas[i].Snapshot, probe.Replicas[i].SnapshotEpoch = holds.Newest.Number, holds.Newest.Epoch
			probe.Replicas[i].SnapshotGUID = holds.Newest.GUID
		}
	}
	v := CanDestroy(probe, node, volumeGone)
	if !v.Allowed {
		return v, fmt.Errorf("%s may not delete its copy: %s: %w", node, v.Reason, ErrUnsafe)
	}
	if i := s.index(node); i >= 0 {
		if s.Replicas[i].Active && !volumeGone {
			return v, fmt.Errorf("%s is the active primary: %w", node, ErrUnsafe)
		}
		s.Replicas = append(s.Replicas[:i], s.Replicas[i+1:]...)
	}
	return v, nil
}

func (s *State) index(n Node) int {
	for i, r := range s.Replicas {
		if r.Node == n {
			return i
		}
	}
	return -1
}

// Takeover makes node the active primary in place of lost, a primary that
// can no longer serve (its node is gone, or its lease ran out). node must
// be ready and the newest of the remaining replicas: writes lost made
// after that snapshot are given up (at most one snapshot interval), and
// lost is fenced: its later snapshots are of an older epoch, so when it
// returns it rolls them back (PlanRollbackIncremental) instead of serving
// them. Until it reports a snapshot of the new epoch its copy is on the
// branch left here (Forked, OnFencedBranch): never ready, never a
// successor, never counted as newer, so that a takeover from node before
// node's first snapshot cannot make that branch (or writes never
// snapshotted on top of the snapshot both share) the volume's history.
//
// Another replica's fetch target is not counted as held: a receive
// completes only from a replica holding its target, and one that another
// remaining replica holds already makes that replica newer than node; a
// target only lost holds can never complete (a partial receive of it,
// kept to be resumed, holds nothing), and copies each holding such a
// partial receive must not refuse each other for ever. Those targets, on
// the branch given up, are forgotten here.
//
// lost must still be active: a primary that stepped down ended its term
// with its final snapshot recorded (Demote), and a takeover, which may
// give up up to lag snapshots, would give up that handover's last writes,
// which its unpublish already reported safe. The next primary is promoted
// (Promote), holding the final snapshot. So a takeover decided on a view
// where lost was active, and a release's StepDown, cannot both win.
func Takeover(s *State, node, lost Node, lag uint64) error {
	if s.Primary != lost {
		return fmt.Errorf("takeover from %s: the primary is %q: %w", lost, s.Primary, ErrFenced)
	}
	if r, ok := s.Replica(lost); !ok || !r.Active {
		return fmt.Errorf("takeover from %s: its term of epoch %d ended (it stepped down): %w", lost, s.Epoch, ErrFenced)
	}
	i := s.index(node)
	if i < 0 || node == lost {
		return fmt.Errorf("takeover by %s: %w", node, ErrUnknownReplica)
	}
	if !s.Replicas[i].Taker {
		// The lost primary's guard may not know this replica (its view
		// lagged, or it never saw the copy report): it would not have
		// asked this node for a promise, and may still be writing on the
		// promises of the nodes it knows. Only a replica it acknowledged
		// may take over; the others wait for it (or for an operator).
		return fmt.Errorf("takeover by %s: the primary on %s never acknowledged it as a taker in epoch %d: %w", node, lost, s.Epoch, ErrNotTaker)
	}
	if s.Replicas[i].Snapshot == 0 {
		// An empty successor would snapshot nothing as the newest data and
		// make every returning replica replace its copy with it.
		return fmt.Errorf("takeover by %s: it holds no snapshot: %w", node, ErrBehind)
	}
	if r := s.Replicas[i]; r.OnFencedBranch() {
		// A primary an earlier takeover replaced, back before it resynced:
		// its copy may hold the writes that takeover gave up.
		return fmt.Errorf("takeover by %s: its copy is on the branch a takeover of epoch %d left: %w", node, r.Forked.Epoch, ErrFenced)
	}
	if !IsReady(*s, s.Replicas[i], lag) {
		// More than the allowed lag behind the newest entry, the lost
		// primary's included (a stored Ready flag is only what the replica
		// last said): taking over would give up reported snapshots.
		return fmt.Errorf("takeover by %s: it is not ready (more than %d snapshots behind the newest reported): %w", node, lag, ErrBehind)
	}
	mine := s.Replicas[i].Holds()
	for _, r := range s.Replicas {
		if r.Node == lost || r.Node == node || r.OnFencedBranch() {
			continue
		}
		if r.Holds().Newer(mine) {
			return fmt.Errorf("takeover by %s: %s holds a newer snapshot: %w", node, r.Node, ErrBehind)
		}
	}
	for j := range s.Replicas {
		if s.Replicas[j].Fetching.Newer(mine) {
			// A target on the branch given up: only the lost primary
			// holds it, so a partial receive of it (kept to be resumed)
			// never completes, and it need not be kept anywhere.
			s.Replicas[j].Fetching = Snap{}
		}
	}
	if j := s.index(lost); j >= 0 {
		// Its copy is not ready until it reports again: it may hold a
		// fenced term's writes (rolled back when it returns), and its
		// stale Ready would let pods (and the lifting of its node's
		// taint) count on it. It stays on the branch left here until it
		// reports a snapshot of the new epoch (OnFencedBranch).
		s.Replicas[j].Active = false
		s.Replicas[j].Ready = false
		s.Replicas[j].Forked = Fork{Epoch: s.Epoch + 1, At: mine}
	}
	s.Epoch++
	s.Primary = node
	s.Replicas[i].Active = true
	clearTakers(s)
	return nil
}

// TakeoverReleased gives a volume a line of history again when its last
// primary, lost, released it (Demote recorded its final snapshot) and was
// then lost holding the only copy of that snapshot: no replica can be
// promoted (none holds the newest snapshot) and Takeover refuses (lost is
// not active), so without this the volume would wait for lost's node for
// ever. node takes over as Takeover would judge it (ready within lag of
// every entry, lost's final snapshot included: at most lag snapshots, the
// final one among them, are given up; the newest of the others; not on a
// fenced branch), but stays inactive: nobody writes a released volume,
// and the next publish promotes whichever replica it lands on, as after
// any release. The epoch grows, so lost's final snapshot is a fenced
// primary's history: lost is on the branch left here (OnFencedBranch) and,
// when it returns, keeps that snapshot aside and rolls it back once the
// volume's line has a newer snapshot. It returns the snapshot given up,
// for the caller to name.
//
// It refuses (ErrFenced) when lost is not the volume's last primary, is
// active (Takeover's case), or when another replica holds its final
// snapshot or a newer one: nothing is lost, a publish promotes that one.
func TakeoverReleased(s *State, node, lost Node, lag uint64) (Snap, error) {
	j := s.index(lost)
	if s.Primary != lost || j < 0 {
		return Snap{}, fmt.Errorf("released takeover from %s: the volume's last primary is %q: %w", lost, s.Primary, ErrFenced)
	}
	final := s.Replicas[j]
	switch {
	case final.Active:
		return Snap{}, fmt.Errorf("released takeover from %s: it is the active primary of epoch %d (a takeover, not a released one): %w", lost, s.Epoch, ErrFenced)
	case final.Snapshot == 0 || final.OnFencedBranch():
		return Snap{}, fmt.Errorf("released takeover from %s: it holds no final snapshot of the volume's: %w", lost, ErrFenced)
	}
	for _, r := range s.Replicas {
		if r.Node != lost && !r.OnFencedBranch() && holdsAtLeast(r, final) {
			return Snap{}, fmt.Errorf("released takeover from %s: %s holds its final snapshot %d of epoch %d or a newer one: nothing to take over: %w",
				lost, r.Node, final.Snapshot, final.SnapshotEpoch, ErrFenced)
		}
	}
	// Judged and applied as a takeover of an active lost, on a copy: the
	// same successor, fork and forgotten targets; then node steps back.
	t := *s
	t.Replicas = append([]Replica(nil), s.Replicas...)
	t.Replicas[j].Active = true
	if err := Takeover(&t, node, lost, lag); err != nil {
		return Snap{}, fmt.Errorf("released %w", err)
	}
	t.Replicas[t.index(node)].Active = false
	*s = t
	return final.Holds(), nil
}
