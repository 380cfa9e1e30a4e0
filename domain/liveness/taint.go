package liveness

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// The fenced taint. After a takeover the survivor taints the lost node
// (Kubernetes: ferry.zfs.csi.io/fenced:NoSchedule) before it deletes the
// node's pods of the volume: the volume's PersistentVolume keeps the node
// it was provisioned on as a term of its node affinity, so without the
// taint the recreated pod could be scheduled back onto a node that is
// gone, or cut off, or whose copy the new primary's term has left behind.
// The taint is node-wide, so it must not outlive that purpose: it is the
// lost node's own daemon that lifts it (LiftTaint), once
//
//   - the node renews its lease again (Observer.Renewing): the other nodes
//     no longer take it for lost, its pods are no longer lost with it; and
//   - no copy here holds a fenced branch (replica.State.Fenced): snapshots
//     of an ended term that the volume's primary lacks, which the copy's
//     volume manager keeps aside and rolls back (5.8). Until then its
//     machine may still call that copy ready (it sees itself the newest),
//     and the node's aftermath is not over. This wait is bounded
//     (TaintRule.FencedWait): a branch that stays (no room to keep it
//     aside, its volume manager down, a primary that never snapshots)
//     needs an operator, and the node is not held for it.
//
// A copy that is merely not ready (behind, a full pool, a conflict an
// operator must settle) holds nothing its primary lacks and does not keep
// the node tainted: it is reported (TaintVerdict.Unready). The volume's
// pods are kept off it by other means: the survivor removed the node's
// placement label of the volume, its daemon sets it again only where
// placement.UsableOn says (ready copies, and no other active primary),
// and a publish there promotes the copy only once it has caught up
// (replica.Promote refuses a copy older than the newest). Nothing of the
// data depends on the taint: the taint only spares the scheduler a node
// where the volume cannot be used yet.

// TaintRule says when a node checks its own fenced taint and how long a
// fenced branch may keep it.
type TaintRule struct {
	// Check is the least time between two checks of the taint. A check
	// reads the node; only while the node is tainted, also the state of
	// every local copy and the pool's snapshot list.
	Check time.Duration
	// FencedWait is how long a node renewing its lease keeps its taint
	// for copies holding a fenced branch; then it lifts it anyway and
	// reports them.
	FencedWait time.Duration
}

// DefaultFencedWait bounds the wait for fenced branches. A branch
// normally goes within a snapshot interval of the new primary plus the
// time to keep it aside (a full copy within the pool) and roll back; one
// still there after 10 minutes waits for an operator, whom the volume
// manager's events (FencedWritesNotKept, a conflict) and the lift's event
// tell.
const DefaultFencedWait = 10 * time.Minute

// DefaultTaintRule checks every 5 lease renewals (5 s at the default
// renewal) and waits DefaultFencedWait for fenced branches.
func DefaultTaintRule(c Config) TaintRule {
	return TaintRule{Check: 5 * c.Renew, FencedWait: DefaultFencedWait}
}

// WithDefaults fills the fields of r left zero from DefaultTaintRule(c).
func (r TaintRule) WithDefaults(c Config) TaintRule {
	d := DefaultTaintRule(c)
	if r.Check <= 0 {
		r.Check = d.Check
	}
	if r.FencedWait <= 0 {
		r.FencedWait = d.FencedWait
	}
	return r
}

// LocalCopy is one copy on the node as the taint rule sees it: its
// volume's state, and the newest replication snapshot the node's pool
// holds of it (zero: none). The pool is read because the copy's entry may
// lag: a primary cut off took snapshots it could not report, and those
// are its fenced branch.
type LocalCopy struct {
	State replica.State
	Pool  replica.Snap
}

// CopyNote names a copy and says why it is noted.
type CopyNote struct {
	Volume volume.ID
	Why    string
}

// TaintView is what a node knows when it checks its own fenced taint.
type TaintView struct {
	Self replica.Node
	// Renewing: the node's own lease is seen renewing (Observer.Renewing).
	Renewing bool
	// Waited is how long the node has been found tainted with its lease
	// renewing, on its own clock.
	Waited time.Duration
	Copies []LocalCopy
}

// TaintVerdict says whether a node lifts its own fenced taint, and why.
type TaintVerdict struct {
	Lift bool
	// Waiting are the copies holding a fenced branch, by volume: they keep
	// the taint until FencedWait has passed (then Lift, and they are
	// reported).
	Waiting []CopyNote
	// Unready are the copies not ready that hold nothing their primary
	// lacks: they never keep the taint; they are reported when it is
	// lifted.
	Unready []CopyNote
	Reason  string
}

// LiftTaint decides whether node v.Self lifts its fenced taint (see the
// rule above): while its lease is not seen renewing, never; else once no
// copy here holds a fenced branch, or once it has waited fencedWait for
// those that do. A copy being deleted, or active here, or not listed in
// its state, is not looked at.
func LiftTaint(v TaintView, fencedWait time.Duration) TaintVerdict {
	if !v.Renewing {
		return TaintVerdict{Reason: "the node's own lease is not seen renewing: the other nodes may still take it for lost"}
	}
	var out TaintVerdict
	copies := slices.Clone(v.Copies)
	slices.SortFunc(copies, func(a, b LocalCopy) int { return strings.Compare(string(a.State.Volume), string(b.State.Volume)) })
	for _, c := range copies {
		st := c.State
		r, ok := st.Replica(v.Self)
		if !ok || st.Deleting || r.Active {
			continue
		}
		holds := r.Holds()
		if c.Pool.Newer(holds) {
			holds = c.Pool
		}
		p, _ := st.Replica(st.Primary)
		switch {
		case r.OnFencedBranch() && !resyncable(st, r):
			// Kept on the branch a takeover left, with nothing newer to
			// resync from yet (a released volume taken over is published
			// nowhere): it cannot be rolled back until the volume is
			// published again, and other pods need not wait for that.
			out.Unready = append(out.Unready, CopyNote{Volume: st.Volume, Why: fmt.Sprintf(
				"on the branch the takeover of epoch %d left, with nothing newer to resync from until the volume is published again", r.Forked.Epoch)})
		case st.Fenced(holds) || r.OnFencedBranch():
			out.Waiting = append(out.Waiting, CopyNote{Volume: st.Volume, Why: fmt.Sprintf(
				"holds snapshot %d of ended epoch %d, which its primary %s lacks (it holds %d of epoch %d): an ended term's writes, to be kept aside and rolled back",
				holds.Number, holds.Epoch, st.Primary, p.Snapshot, p.SnapshotEpoch)})
		case !r.Ready:
			out.Unready = append(out.Unready, CopyNote{Volume: st.Volume, Why: unready(st, holds)})
		}
	}
	switch {
	case len(out.Waiting) == 0:
		out.Lift = true
		out.Reason = "the node renews its lease and no copy here holds anything its primary lacks"
		if n := len(out.Unready); n > 0 {
			out.Reason += fmt.Sprintf(" (%d not ready, reported instead of waited for)", n)
		}
	case v.Waited >= fencedWait:
		out.Lift = true
		out.Reason = fmt.Sprintf("the node has renewed its lease for %s while %d copies here still hold a fenced branch: the taint is lifted so as not to hold the node, and they are reported", v.Waited, len(out.Waiting))
	default:
		out.Reason = fmt.Sprintf("%d copies here hold a fenced branch (%s first): the taint stays until they are rolled back, or for %s at most", len(out.Waiting), out.Waiting[0].Volume, fencedWait-v.Waited)
	}
	return out
}

// resyncable: some replica holds a snapshot of the line r's fenced branch
// left (of the takeover's epoch or later), which r can roll back onto.
func resyncable(st replica.State, r replica.Replica) bool {
	for _, o := range st.Replicas {
		if o.Snapshot != 0 && o.SnapshotEpoch >= r.Forked.Epoch {
			return true
		}
	}
	return false
}

func unready(st replica.State, holds replica.Snap) string {
	if holds.Number == 0 {
		return "not ready: it holds no snapshot yet"
	}
	why := fmt.Sprintf("not ready: it holds snapshot %d of epoch %d", holds.Number, holds.Epoch)
	if n, ok := st.NewestReplica(); ok {
		why += fmt.Sprintf(", the newest is %d of epoch %d on %s", n.Snapshot, n.SnapshotEpoch, n.Node)
	}
	return why
}

// Renewing reports whether node's lease is seen renewing at now: its
// value changed since this observer first saw it (after its last blind
// spell), the last time less than Duration + Margin ago, so that the
// other observers no longer take node for lost either.
func (o *Observer) Renewing(node replica.Node, now time.Duration) bool {
	s, ok := o.seen[node]
	return ok && !o.blind && s.renewed && !o.cfg.Lost(s.at, now)
}

// TaintWatch is a node's memory of its own fenced taint, on its own
// clock: when it last checked, and since when it has been found tainted
// with its lease renewing. The cadence it keeps is the stated rule: check
// only while the node's lease is seen renewing (otherwise the taint stays
// anyway), the first time at once, then at most once per TaintRule.Check.
type TaintWatch struct {
	rule     TaintRule
	self     replica.Node
	checked  bool
	last     time.Duration
	renewing bool
	tainted  bool
	since    time.Duration
}

// NewTaintWatch returns the watch of node self's taint.
func NewTaintWatch(rule TaintRule, self replica.Node) *TaintWatch {
	return &TaintWatch{rule: rule, self: self}
}

// Due says whether the node checks its taint at now, renewing telling
// whether its lease is seen renewing; true records the check as made. A
// lease not renewing ends the time waited: the node may be taken for lost
// again.
func (w *TaintWatch) Due(now time.Duration, renewing bool) bool {
	w.renewing = renewing
	if !renewing {
		w.tainted = false
		return false
	}
	if w.checked && now-w.last < w.rule.Check {
		return false
	}
	w.checked, w.last = true, now
	return true
}

// Untainted records a check that found the node without its taint.
func (w *TaintWatch) Untainted() { w.tainted = false }

// Tainted records a check at now that found the node tainted, with its
// copies as read, and decides (LiftTaint). The time waited runs from the
// first such check while the lease renews, until a check finds the taint
// gone.
func (w *TaintWatch) Tainted(now time.Duration, copies []LocalCopy) TaintVerdict {
	if !w.tainted {
		w.tainted, w.since = true, now
	}
	return LiftTaint(TaintView{Self: w.self, Renewing: w.renewing, Waited: now - w.since, Copies: copies}, w.rule.FencedWait)
}
