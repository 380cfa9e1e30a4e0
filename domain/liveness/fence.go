package liveness

import (
	"fmt"

	"github.com/ferry-csi/ferry/domain/replica"
)

// The guard's verdicts: why a copy on this node is fenced, and when its
// pods are given back. The guard (app/failover.Guard, in the daemon)
// gathers what each verdict asks for (its lease and promises, its view of
// the shared state, the node's mounts, a fresh read), calls it, and
// carries out what it says; it decides nothing itself. A copy is fenced
// here for one of three reasons:
//
//   - FenceOrGiveBack: the node may no longer write (Decide: its lease ran
//     out and a taker it acknowledged has not promised), and the copy is
//     the primary of a term with takers. It is given back (may write
//     again) once Decide says it may.
//   - FenceUnknown: the lease ran out and the node's view names no state
//     of a local replicated copy (a daemon started while cut off has no
//     view): it may be a primary that another node takes over. It is
//     given back once the lease is held again.
//   - FenceTakenOver: another node is the volume's active primary while a
//     pod here still mounts the copy read/write: it writes into a term
//     that ended. Never given back: the pods are the survivor's to move.
//
// GiveBackPods then says whether the pods of a copy no longer fenced are
// restarted (they sit on the fence's empty read-only placeholder, which
// only a new publish replaces) or left alone (the copy was taken over
// meanwhile, or is gone).

// Fence is the guard's record of a fence it made here (FenceOrGiveBack,
// FenceUnknown) and may end; the zero Fence is none.
type Fence struct {
	// Reason is why the copy was fenced, as logged and told in events.
	Reason string
	// Unknown: fenced because the node's view named no state of the copy
	// (FenceUnknown); it may have been a secondary's, its pods read-only.
	Unknown bool
	// Watchdog: fenced by the copy's volume manager's watchdog (its
	// record, Watch), which fences before it knows whether the copy is a
	// primary: a secondary's read-only pods too.
	Watchdog bool
	// Epoch is the term fenced (FenceOrGiveBack's); zero for the others.
	Epoch replica.Epoch
}

// Holds says whether f is a fence of the term in epoch here: a term's
// fence is of its own epoch only (a fence of a term taken over meanwhile
// says nothing of the node's next term of the volume, which must be
// fenced, or not, on its own); the other fences know no term.
func (f Fence) Holds(epoch replica.Epoch) bool {
	return f.Fenced() && (f.Unknown || f.Watchdog || f.Epoch == epoch)
}

// Fenced reports whether f records a fence.
func (f Fence) Fenced() bool { return f != Fence{} }

// GuardAct is what the guard does with one copy here.
type GuardAct int

const (
	// Leave: nothing to do (the copy writes on, or stays fenced).
	Leave GuardAct = iota
	// FenceIt: stop the copy's writers and cover its pods' targets with an
	// empty read-only placeholder (ports.Fencer), for Reason.
	FenceIt
	// GiveBack: the fence ends, the copy may be written again; its pods
	// are restarted as GiveBackPods says.
	GiveBack
)

// GuardVerdict is what the guard does with one copy here, and why.
type GuardVerdict struct {
	Act    GuardAct
	Reason string
}

// TermVerdict is FenceOrGiveBack's answer for one term here: what the
// guard does, and Decide's verdict it rests on (its Until: when to look
// again at the latest while the node may write).
type TermVerdict struct {
	GuardVerdict
	Write Verdict
}

// FenceOrGiveBack judges a term whose primary is here (a volume whose
// takers this node acknowledged, Ledger.Terms), fenced tells whether the
// guard has fenced it: while the node may write (Decide), a fenced term
// is given back and an unfenced one left; once it may not, an unfenced
// term is fenced and a fenced one stays so.
func FenceOrGiveBack(st Standing, takers []replica.Node, fenced bool) TermVerdict {
	v := Decide(st, takers)
	switch {
	case v.MayWrite && fenced:
		return TermVerdict{GuardVerdict{GiveBack, v.Reason}, v}
	case !v.MayWrite && !fenced:
		return TermVerdict{GuardVerdict{FenceIt, v.Reason}, v}
	}
	return TermVerdict{GuardVerdict{Leave, v.Reason}, v}
}

// Lapsed says whether a renewal sent at st.Now (the standing as it was
// then, before the renewal) came after the node had lost the right to
// write a term with takers: its lease had run out and not every taker
// had promised. Another node may have taken the term over meanwhile,
// and the renewal landing says nothing of that; the guard fences the
// term before it writes again, and gives it back as after any fence
// (the resume recorded by compare-and-swap, refused after a takeover).
func Lapsed(st Standing, takers []replica.Node) bool {
	return len(takers) > 0 && !Decide(st, takers).MayWrite
}

// LeaseSeen is what the guard knows of its own lease when it looks at the
// copies its view does not know.
type LeaseSeen struct {
	// Held: the node holds its lease now.
	Held bool
	// Tried: a renewal was answered (or timed out) since the daemon
	// started; before that, a lease not held says nothing.
	Tried bool
}

// LooksForUnknown says whether the guard lists the local copies to fence
// the unknown ones (FenceUnknown): only once it tried to renew and does
// not hold its lease.
func (l LeaseSeen) LooksForUnknown() bool { return l.Tried && !l.Held }

// UnknownCopy is a local copy as FenceUnknown sees it.
type UnknownCopy struct {
	// Known: the node's view holds a state of the copy's volume.
	Known bool
	// Fence is the guard's fence of the copy (zero: none).
	Fence Fence
	// SingleCopy: the copy's own metadata says its volume has one copy
	// (replicationFactor 1): nobody can take it over.
	SingleCopy bool
}

// ReasonUnknown is why FenceUnknown fences a copy.
const ReasonUnknown = "the node's lease ran out and its view names no state of this local copy (it may be a primary another node takes over)"

// FenceUnknown judges a local copy the guard may have to fence without
// knowing its state: while the lease is held, a copy fenced for that
// (Fence.Unknown) is given back; once the guard tried to renew and does
// not hold its lease, a replicated copy its view names no state of, not
// fenced yet, is fenced (no promise can be matched to takers nobody
// knows). A copy the view knows is judged by its term (FenceOrGiveBack).
func FenceUnknown(lease LeaseSeen, c UnknownCopy) GuardVerdict {
	switch {
	case lease.Held && c.Fence.Unknown:
		return GuardVerdict{GiveBack, "the node holds its lease again"}
	case !lease.LooksForUnknown():
		return GuardVerdict{Leave, "the node holds its lease, or has not tried to renew it yet"}
	case c.Known:
		return GuardVerdict{Leave, "the view names the copy's state: its term decides"}
	case c.Fence.Fenced():
		return GuardVerdict{Leave, "fenced already: " + c.Fence.Reason}
	case c.SingleCopy:
		return GuardVerdict{Leave, "no other copy: nobody takes it over"}
	}
	return GuardVerdict{FenceIt, ReasonUnknown}
}

// Reading is a fact about the node that the guard reads only once a
// verdict asks for it (NotRead until then).
type Reading int

const (
	NotRead Reading = iota
	ReadFalse
	ReadTrue
)

// ReadingOf is the Reading of a fact read.
func ReadingOf(b bool) Reading {
	if b {
		return ReadTrue
	}
	return ReadFalse
}

// TakenOverView is what the guard knows of one volume in its view when it
// looks for a term taken over from under a pod here.
type TakenOverView struct {
	Self  replica.Node
	State replica.State // as the view shows it
	// SeenActive: this daemon saw the volume's primary active here (and
	// has not seen it released since).
	SeenActive bool
	// FirstLook: this daemon looks at the volume for the first time (a
	// previous process may have seen it active here, and been down while
	// a survivor took it over).
	FirstLook bool
	// PodsWrite: the copy's filesystem is mounted read/write here anywhere
	// but at its own mountpoint (a pod writes it); a copy gone is ReadFalse.
	PodsWrite Reading
	// PrimaryNow: a fresh read of the state shows Self the active primary.
	PrimaryNow Reading
}

// TakenOverAct is what the guard does about a volume that may have been
// taken over from under a pod here.
type TakenOverAct int

const (
	// NotTakenOver: nothing to do.
	NotTakenOver TakenOverAct = iota
	// StillPrimary: the volume's active primary is here: remember it.
	StillPrimary
	// PrimaryGone: a volume seen active here is not taken over from under
	// a writer here (released: nobody active, or active here again; or no
	// pod here writes it; or fenced): forget it was active here.
	PrimaryGone
	// ReadPodsWrite: read whether a pod here writes the copy (PodsWrite),
	// then ask again.
	ReadPodsWrite
	// ReadPrimaryNow: read the state afresh (PrimaryNow), then ask again.
	ReadPrimaryNow
	// FenceTaken: fence the copy, for Reason; then forget it was active
	// here.
	FenceTaken
)

// TakenOverVerdict is FenceTakenOver's answer, and why.
type TakenOverVerdict struct {
	Act    TakenOverAct
	Reason string
}

// FenceTakenOver judges a volume in the guard's view: whether its term
// here ended under a pod still writing it. Another node active as the
// volume's primary, not released by this one (a survivor took it over,
// say while this node's renewals failed but its reads did not), while a
// pod here mounts the copy read/write: that pod writes into a term that
// ended, and the copy is fenced. A volume released here (no active
// primary, or this node's pods unmounted first, as every handover does)
// is fenced never. A volume this daemon never saw active here is looked
// at once, when it is first seen (its previous process may have been down
// during the takeover), and fenced only when a fresh read confirms this
// node is not the primary: a view lagging behind the node's own
// promotion fences nothing.
func FenceTakenOver(v TakenOverView) TakenOverVerdict {
	st := v.State
	self, listed := st.Replica(v.Self)
	if listed && self.Active && st.Primary == v.Self {
		return TakenOverVerdict{StillPrimary, "the active primary is here"}
	}
	other, ok := st.Replica(st.Primary)
	if !ok || !other.Active || st.Primary == v.Self {
		if v.SeenActive {
			return TakenOverVerdict{PrimaryGone, "released: no active primary elsewhere"}
		}
		return TakenOverVerdict{NotTakenOver, "no other node is the active primary"}
	}
	if v.SeenActive {
		switch v.PodsWrite {
		case NotRead:
			return TakenOverVerdict{ReadPodsWrite, "another node is the active primary"}
		case ReadFalse:
			return TakenOverVerdict{PrimaryGone, "another node is the active primary and no pod here writes the copy"}
		}
		return TakenOverVerdict{FenceTaken, fmt.Sprintf("%s is the active primary (epoch %d) while pods here still mount the copy read/write", st.Primary, st.Epoch)}
	}
	if !v.FirstLook || !listed {
		return TakenOverVerdict{NotTakenOver, "never seen active here, and looked at before (or no copy listed here)"}
	}
	switch v.PodsWrite {
	case NotRead:
		return TakenOverVerdict{ReadPodsWrite, "first look: another node is the active primary"}
	case ReadFalse:
		return TakenOverVerdict{NotTakenOver, "no pod here writes the copy"}
	}
	switch v.PrimaryNow {
	case NotRead:
		return TakenOverVerdict{ReadPrimaryNow, "pods here write the copy: is the view behind this node's own promotion?"}
	case ReadTrue:
		return TakenOverVerdict{NotTakenOver, "a fresh read shows this node the active primary: the view lags"}
	}
	return TakenOverVerdict{FenceTaken, fmt.Sprintf("%s is the active primary (epoch %d) while pods here, which this daemon did not see start, mount the copy read/write", st.Primary, st.Epoch)}
}

// Resumed is what the guard's resume of a copy given back found
// (replica.Resume, by compare-and-swap, before any pod writes again).
type Resumed int

const (
	// ResumedPrimary: this node is still the volume's active primary,
	// recorded as resuming (a takeover decided on the lease verdict it
	// outlived is then refused).
	ResumedPrimary Resumed = iota
	// ResumedNotPrimary: this node is no longer the active primary (taken
	// over, or never was: a secondary's copy fenced as unknown).
	ResumedNotPrimary
	// ResumedGone: the volume is gone.
	ResumedGone
)

// GiveBackVerdict says whether the pods here of a copy given back are
// restarted (deleted, for their controllers to start them again on the
// volume), and why.
type GiveBackVerdict struct {
	Restart bool
	// Unlock: lift the volume's write lock (a watchdog's fence leaves the
	// filesystem read-only) before the pods are restarted: only while this
	// node is still the volume's active primary. Any other copy stays
	// locked until a read/write publish makes it the writer again.
	Unlock bool
	// FinishFence: the fence was a watchdog's, which stops (SIGSTOP) the
	// holders and leaves the mounts: the daemon's own fence finishes it
	// (the stopped processes killed, the pods' targets covered) before
	// the pods are restarted, or their deletion would wait out the grace
	// period of processes that cannot hear SIGTERM.
	FinishFence bool
	Reason      string
}

// GiveBackPods judges a copy whose fence f ended (GiveBack): its pods
// here sit on the fence's empty read-only placeholder, which only a new
// publish replaces. They are restarted while this node is still the
// volume's active primary, recorded as resuming; a takeover seen late
// evicts them itself, elsewhere. A copy fenced unknown may have been a
// secondary's, its pods read-only: they go back whoever the primary is.
// A volume gone has nothing to give back.
func GiveBackPods(f Fence, r Resumed) GiveBackVerdict {
	switch {
	case r == ResumedGone:
		return GiveBackVerdict{Reason: "the volume is gone"}
	case r == ResumedPrimary:
		return GiveBackVerdict{Restart: true, Unlock: true, FinishFence: f.Watchdog, Reason: "still the active primary, resumed"}
	case f.Unknown:
		return GiveBackVerdict{Restart: true, Reason: "fenced unknown: its pods go back whoever the primary is"}
	case f.Watchdog:
		return GiveBackVerdict{Restart: true, FinishFence: true, Reason: "fenced by its watchdog, which may have been a secondary's: its pods go back whoever the primary is"}
	}
	return GiveBackVerdict{Reason: "no longer the active primary: taken over, its pods are the survivor's to move"}
}
