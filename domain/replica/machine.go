package replica

import (
	"errors"
	"fmt"
	"maps"
	"time"
)

// MachineConfig tunes a replica's decisions.
type MachineConfig struct {
	Self Node
	// AllowedLag is how many snapshots behind the newest a replica may be
	// and still be ready to take over.
	AllowedLag uint64
	// Keep is how many of its newest snapshots a replica keeps (plus every
	// snapshot another replica still needs as its base).
	Keep int
	// SnapshotEvery is the primary's snapshot interval, in ticks, unless
	// the volume's state sets one (State.SnapshotInterval) and Tick is
	// known.
	SnapshotEvery int
	// Tick is the period of the Tick events (0: unknown: SnapshotEvery
	// alone counts).
	Tick time.Duration
}

// Machine is one replica's deterministic core, in the style of etcd's raft:
// the caller feeds it events (what it observed, what came of an action,
// the passing of time) with Step, asks for the next action with Next, and
// reports the action's outcome as an ActionDone event. It performs no I/O
// and reads no clock, so any interleaving of events can be replayed in a
// unit test (testdata/*.txt).
//
// At most one action is outstanding at a time: transfers, rollbacks and
// snapshots of one volume on one node never overlap.
type Machine struct {
	cfg MachineConfig

	state     State
	haveState bool
	seenEpoch Epoch // the newest epoch observed: older views are ignored
	local     []Snap
	hasData   bool
	unchanged bool // the store told that nothing was written since the newest snapshot
	haveLocal bool

	// viewed: a read of the shared state succeeded once (state is a view).
	// stale: the last read failed; decisions follow decideStale's rules
	// on state, the last view, until the next Observed. roleChanged: an
	// action of this machine (a promotion, a step-down) may have changed
	// who the primary is since that view: nothing is decided on it while
	// stale.
	viewed, stale, roleChanged bool

	peer      Node   // the peer whose snapshot list peerSnaps is
	peerSnaps []Snap // valid until the next tick or transfer
	havePeer  bool

	// avoid holds peers whose listing or transfer failed since the last
	// successful transfer: the next source newer than this replica is
	// tried instead (cleared when none is left).
	avoid map[Node]bool
	// modified: an incremental receive found the dataset changed since its
	// newest snapshot. Those changes are snapshotted first when this
	// replica was the primary of the current epoch, rolled back (raising
	// RolledBack) otherwise.
	modified bool
	// releasing: the primary is asked to end its term (unpublish): a final
	// snapshot, then Demote carrying it; released once done.
	releasing   bool
	finalTaken  bool
	released    bool
	releaseLost string // why a release ended without recording its final snapshot
	// acquiring: a read/write publish asks this replica to become the
	// single active primary (Acquire): it catches up to the newest
	// snapshot, waits while another replica is active, then promotes
	// itself by compare-and-swap; acquired once that write succeeded.
	acquiring bool
	acquired  bool
	// forget: a transfer failed leaving nothing received; its recorded
	// target is cleared (ClearFetch) before anything else.
	forget *Snap

	outstanding Action
	// settled: the last Next found nothing to do on a complete view (see
	// Wake); any event clears it.
	settled     bool
	backoff     bool // an action failed: wait for the next tick before acting again
	ticks       int  // ticks since the primary's last snapshot
	terminating bool
	volumeGone  bool
	left        bool
	alerted     string // the conflict last alerted, so it is said once
	// releaseAlerted is the lost release last alerted: one slot per kind
	// of alert (grow and conform keep theirs in retried), so that two
	// standing alerts of different kinds are each said once instead of
	// taking turns for ever (and starving every other action).
	releaseAlerted string
	// capacity is the local copy's size as last read or grown (known:
	// read since the copy was last made by a full receive); growing the
	// retries of a failed Grow (replication goes on meanwhile).
	capacity      int64
	capacityKnown bool
	growing       retried
	// props are the copy's native properties as last read or set (known
	// with capacityKnown); conforming the retries of a failed Conform.
	props      map[string]string
	conforming retried
}

// retried is a copy's action that may fail without stopping replication
// (Grow, Conform): why it last failed, alerted once, and the ticks before
// it is tried again.
type retried struct {
	failed, alerted string
	wait            int
}

// next is the alert of a failure not said yet, or whether the action
// waits (ok false): nil, true when it may be tried.
func (r *retried) next(event string) (Action, bool) {
	if r.failed != "" && r.alerted != r.failed {
		return Alert{Reason: r.failed, Event: event}, true
	}
	return nil, r.wait == 0
}

// done records the action's outcome.
func (r *retried) done(err error, why string) {
	if err != nil {
		r.failed, r.wait = why, growRetryTicks
		return
	}
	r.failed = ""
}

func (r *retried) tick() {
	if r.wait > 0 {
		r.wait--
	}
}

// SnapshotEvery is the primary's snapshot interval in ticks: the
// volume's own (State.SnapshotInterval, its spec: an edit takes effect at
// the next read) when set and the tick is known, else the configured one.
func (m *Machine) SnapshotEvery() int {
	if iv := m.state.SnapshotInterval; iv > 0 && m.cfg.Tick > 0 {
		return max(1, int((iv+m.cfg.Tick-1)/m.cfg.Tick))
	}
	return m.cfg.SnapshotEvery
}

// NewMachine returns a machine for the replica on cfg.Self.
func NewMachine(cfg MachineConfig) *Machine {
	if cfg.Keep < 1 {
		cfg.Keep = 1
	}
	if cfg.SnapshotEvery < 1 {
		cfg.SnapshotEvery = 1
	}
	return &Machine{cfg: cfg}
}

// Event is an input of the machine.
type Event interface{ event() }

// Observed: a fresh read of the volume's shared state.
type Observed struct{ State State }

// LocalRead: the replication snapshots the local store holds, oldest first,
// and whether it holds the volume's dataset at all. Unchanged: the store
// tells that nothing was written since the newest snapshot (false when
// something was, or when it cannot tell; the caller may ask only when
// terminating, the one decision that uses it).
type LocalRead struct {
	Snaps     []Snap
	HasData   bool
	Unchanged bool
	// CapacityBytes is the local copy's size (its quota and reservation;
	// 0: none, as a received copy has, or no copy), when CapacityRead:
	// it is read only when the machine asks (NeedsCapacity), else the
	// machine keeps what it knew.
	CapacityBytes int64
	CapacityRead  bool
	// Properties are the copy's native properties (at least those the
	// state names), read with its size when CapacityRead.
	Properties map[string]string
}

// PeerRead: the replication snapshots a peer holds.
type PeerRead struct {
	Peer  Node
	Snaps []Snap
}

// Tick: one unit of time passed.
type Tick struct{}

// ActionDone: the outstanding action finished, with its error.
type ActionDone struct {
	Action Action
	Err    error
}

// Terminate: the replica is asked to go away (SIGTERM). Whether its
// volume was deleted is not the caller's to say: only Ferry's deletion
// mark on an observed state says so (State.Deleting).
type Terminate struct{}

// SnapshotNow: the primary must snapshot at its next decision.
type SnapshotNow struct{}

// Release: the active primary ends its term (unpublish): it takes a final
// snapshot and demotes itself carrying it in one compare-and-swap, so that
// the next primary starts from the last write. Released reports when done.
// A Release also ends an Acquire that has not finished.
type Release struct{}

// Acquire: a read/write publish on this node asks this replica to become
// the volume's single active primary. It catches up to the newest
// snapshot any replica holds (fetching as a secondary does), waits while
// another replica is active, and then promotes itself: epoch + 1, in one
// compare-and-swap that checks both again on the newest state. Acquired
// reports when that write succeeded; only then may the volume be mounted
// read/write. A Release that is still finishing completes first, so that a
// pod re-created on the same node starts from its own final snapshot.
type Acquire struct{}

// Abandon: the publish that asked for Acquire gave up (it answered the
// kubelet, which retries later, maybe on another node): stop acquiring. A
// replica that already acquired stays the primary until a Release.
type Abandon struct{}

func (Observed) event()    {}
func (LocalRead) event()   {}
func (PeerRead) event()    {}
func (Tick) event()        {}
func (ActionDone) event()  {}
func (Terminate) event()   {}
func (SnapshotNow) event() {}
func (Release) event()     {}
func (Acquire) event()     {}
func (Abandon) event()     {}

// Action is an output of the machine: something the caller must do and
// report back with ActionDone.
type Action interface{ action() }

// ReportSnapshot: record this replica's newest snapshot and readiness in
// the shared state (a compare-and-swap; it adds the replica if missing).
type ReportSnapshot struct {
	Snap  Snap
	Ready bool
}

// ReadPeer: list the peer's replication snapshots, answer with PeerRead.
type ReadPeer struct{ Peer Node }

// Fetch: record Target as this replica's fetch target in the shared state
// (RecordFetch, a compare-and-swap: from then on no retention destroys it),
// then receive it from Peer, incrementally from Base when set. A failure
// because the dataset changed since Base is reported wrapped around
// ErrModified.
type Fetch struct {
	Peer   Node
	Base   *Snap
	Target Snap
	// Stale: decided on a stale view (StateUnreadable): nothing is
	// recorded (no compare-and-swap can land), the transfer is an
	// incremental from the last view's active primary, and the caller
	// stops it once the state reads again (ErrViewReturned).
	Stale bool
}

// Rollback: discard everything after To. When KeepAs is set, first copy
// the volume as it is aside under that name (SnapshotStore.KeepAside: a
// held copy outside the volumes, for an operator), raising an event that
// names it; a copy that cannot be made (no space) stops the rollback,
// which is retried: nothing is discarded unkept. Then record To as this
// replica's snapshot in the shared state (Report, a compare-and-swap), so
// that nobody counts a copy about to go, then roll back, with Reason
// logged and raised as a RolledBack event (the discarded snapshots are
// listed; none when only changes never snapshotted are discarded).
type Rollback struct {
	To      Snap
	Discard []Snap
	Reason  string
	// KeepAs names the copy kept aside ("" when nothing is kept): set
	// when what goes may be a fenced term's writes (see keepAs).
	KeepAs string
}

// Replace: the local copy shares nothing with the newest and is older.
// Record Target as the fetch target, receive it in full from Peer into
// staging while the old copy stays in place, then, once it is complete,
// record that this replica holds nothing (a compare-and-swap: the old copy
// is no longer counted) and only then destroy the old copy and move the
// new one in place, raising a Replaced event. A failed transfer leaves the
// old copy as it was. When KeepAs is set, the old copy is first kept
// aside under that name, as for a Rollback.
type Replace struct {
	Peer    Node
	Target  Snap
	Discard []Snap
	Reason  string
	KeepAs  string
}

// TakeSnapshot: the primary snapshots the volume as Number of Epoch.
// Periodic: only because an interval passed; when the pool can tell that
// nothing was written since the newest snapshot, the caller skips it and
// answers ErrUnchanged (the interval starts again). A final or a
// catch-up snapshot is always taken.
type TakeSnapshot struct {
	Number   SnapshotNumber
	Epoch    Epoch
	Periodic bool
}

// ForgetFetch: clear this replica's recorded fetch target (ClearFetch, a
// compare-and-swap): its transfer failed and left nothing received.
type ForgetFetch struct{ Target Snap }

// StepDown: end this primary's term of Epoch (Demote), recording Final
// (its newest snapshot, taken after its last write) in the same
// compare-and-swap. Epoch 0 only confirms, on the newest state, that this
// replica is not the active primary.
type StepDown struct {
	Epoch Epoch
	Final Snap
}

// DestroySnapshots: retention; none of them is anyone's base.
type DestroySnapshots struct{ Snaps []Snap }

// BecomePrimary: make this replica the single active primary of a new
// epoch (Promote, a compare-and-swap that refuses while another replica
// is active or holds a newer snapshot, and changes nothing when this
// replica already is the active primary).
type BecomePrimary struct{}

// LeaveVolume: remove this replica from the list by the safe-deletion rule
// (Leave, in a compare-and-swap that fails with ErrUnsafe when not
// allowed); on success the caller destroys the local copy. When KeepAs is
// set, the copy may hold a fenced term's writes (KeepBeforeLeaving): the
// caller first keeps it aside under that name, as for a Rollback, and
// says so in Holds.Kept; a copy that cannot be kept (no space) stays,
// listed, and the leave is retried: nothing is destroyed unkept.
type LeaveVolume struct {
	// Holds is what the local store holds: the rule is applied to it, not
	// to the list's entry, which may lag.
	Holds      Holding
	VolumeGone bool
	// KeepAs names the copy kept aside ("" when nothing is kept; always
	// for a volume being deleted).
	KeepAs string
}

// Alert: a conflict the machine cannot settle; raise it (log and event).
// Event names the event when it is not a conflict of replicas ("":
// Conflict).
type Alert struct {
	Reason string
	Event  string
}

// CopyCannotGrow is the event of a copy that could not take the volume's
// size (Grow failed).
const CopyCannotGrow = "CopyCannotGrow"

// CopyCannotConform is the event of a copy whose properties could not be
// set to the volume's (Conform failed).
const CopyCannotConform = "CopyCannotConform"

// Conform sets the local copy's native properties to the volume's,
// State.Properties (only those that differ): a copy made by a full
// receive has its pool's defaults, and a promoted copy must run as its
// StorageClass said (its compression, its recordsize, atime off so that
// reading a secondary does not change it under its next receive). One
// that fails is alerted and tried again later; replication goes on.
type Conform struct{ Properties map[string]string }

// Grow sets the local copy's size (quota and reservation) to the
// volume's, State.CapacityBytes: a copy made by a receive has none, and
// an expansion recorded in the state reaches every copy. A copy that
// cannot grow (its pool has no room) is alerted and tried again later;
// it keeps replicating meanwhile.
type Grow struct{ Bytes int64 }

func (ReportSnapshot) action()   {}
func (ReadPeer) action()         {}
func (Fetch) action()            {}
func (Rollback) action()         {}
func (Replace) action()          {}
func (TakeSnapshot) action()     {}
func (StepDown) action()         {}
func (ForgetFetch) action()      {}
func (DestroySnapshots) action() {}
func (LeaveVolume) action()      {}
func (BecomePrimary) action()    {}
func (Alert) action()            {}
func (Grow) action()             {}
func (Conform) action()          {}

// Step feeds one event to the machine.
func (m *Machine) Step(ev Event) error {
	if _, isTick := ev.(Tick); !isTick {
		m.settled = false
	}
	switch e := ev.(type) {
	case Observed:
		if e.State.Epoch < m.seenEpoch {
			// A lagging read: epochs only grow, so this view is older than
			// one already seen. It is not decided on; the next read is.
			break
		}
		m.state, m.haveState, m.seenEpoch = e.State, true, e.State.Epoch
		m.viewed, m.stale, m.roleChanged = true, false, false
		if self, _ := e.State.Replica(m.cfg.Self); m.acquired && !m.isPrimary(self) {
			// A view no older than the promotion (epochs only grow) in
			// which this replica is not the active primary: its term ended.
			m.acquired = false
		}
		if self, listed := e.State.Replica(m.cfg.Self); m.haveLocal && (!listed || self.Holds() != m.newestLocal()) {
			// The list disagrees with what the pool was last seen to hold:
			// something other than this machine may have changed the
			// pool (another leaver destroyed the copy): list it again
			// before reporting anything from it.
			m.haveLocal = false
		}
		if e.State.Deleting {
			// The volume is being deleted: this replica goes with it.
			m.terminating, m.volumeGone = true, true
		}
	case StateUnreadable:
		m.stale = m.viewed // with no view at all, nothing is decided
	case LocalRead:
		m.local, m.haveLocal = sorted(e.Snaps), true
		if e.CapacityRead {
			m.capacity, m.capacityKnown = e.CapacityBytes, true
			m.props = e.Properties
		}
		m.hasData = e.HasData || len(e.Snaps) > 0
		if !m.hasData {
			m.capacityKnown = false // no copy: the next one is made by a receive
		}
		m.unchanged = e.Unchanged && len(e.Snaps) > 0
	case PeerRead:
		m.peer, m.peerSnaps, m.havePeer = e.Peer, sorted(e.Snaps), true
	case Tick:
		m.ticks++
		m.havePeer = false // the peer may have moved on
		m.backoff = false
		m.growing.tick()
		m.conforming.tick()
	case Terminate:
		m.terminating = true
		// The leave is judged on what the store holds now (its newest
		// snapshot, and whether it changed since: a fenced term's writes
		// are kept aside first): listed again before deciding.
		m.haveLocal = false
	case SnapshotNow:
		m.ticks = max(m.ticks, m.SnapshotEvery())
	case Release:
		if !m.releasing {
			m.releasing, m.finalTaken, m.released, m.releaseLost = true, false, false, ""
		}
		m.acquiring, m.acquired = false, false
	case Acquire:
		// Every publish confirms on the newest state, even where this
		// replica acquired before: a takeover may have ended that term.
		m.acquiring, m.acquired = true, false
	case Abandon:
		m.acquiring = false
	case ActionDone:
		if m.outstanding == nil {
			return fmt.Errorf("ActionDone(%T) with no action outstanding", e.Action)
		}
		m.done(e)
		m.outstanding = nil
		if e.Err != nil && !errors.Is(e.Err, ErrUnchanged) && !errors.Is(e.Err, ErrViewReturned) && !errors.Is(e.Err, ErrTermEnded) {
			m.backoff = true // retried on a later tick, never in a tight loop
		}
	default:
		return fmt.Errorf("unknown event %T", ev)
	}
	return nil
}

// done applies an action's outcome. What the action may have changed must
// be read again before the next decision (Observed after a report, LocalRead
// after anything that touched the store), so a decision never rests on a
// view the machine's own action made stale.
func (m *Machine) done(e ActionDone) {
	switch a := e.Action.(type) {
	case ReportSnapshot:
		m.haveState = false
	case ReadPeer:
		if e.Err != nil && !errors.Is(e.Err, ErrViewReturned) && !errors.Is(e.Err, ErrTermEnded) {
			m.avoidPeer(a.Peer)
		}
	case Fetch:
		m.haveLocal, m.havePeer, m.haveState = false, false, false
		if a.Base == nil {
			m.capacityKnown = false // a full receive makes a new dataset, with no quota
		}
		switch {
		case e.Err == nil:
			m.avoid = nil
		case errors.Is(e.Err, ErrViewReturned):
			// Stopped because the state reads again: no failure of the
			// peer's, and nothing was recorded to forget.
		case a.Stale && errors.Is(e.Err, ErrModified):
			m.modified = true
		case a.Stale:
			// Nothing was recorded (a stale view's fetch records no
			// target): nothing to forget.
			m.avoidPeer(a.Peer)
		case errors.Is(e.Err, ErrModified):
			m.modified = true
			m.forgetTarget(a.Target)
		case errors.Is(e.Err, ErrPartialKept) && errors.Is(e.Err, ErrTermEnded):
			// The term ended: no failure of the peer's; the target stays
			// recorded, the token names it.
		case errors.Is(e.Err, ErrPartialKept):
			m.avoidPeer(a.Peer) // the target stays recorded: the token names it
		case errors.Is(e.Err, ErrTermEnded):
			m.forgetTarget(a.Target) // stopped, no failure of the peer's
		default:
			m.avoidPeer(a.Peer)
			m.forgetTarget(a.Target)
		}
	case Replace:
		m.haveLocal, m.havePeer, m.haveState, m.capacityKnown = false, false, false, false
		switch {
		case e.Err == nil:
			m.avoid = nil
		case errors.Is(e.Err, ErrTermEnded):
			m.forgetTarget(a.Target) // stopped, no failure of the peer's
		default:
			m.avoidPeer(a.Peer)
			m.forgetTarget(a.Target)
		}
	case ForgetFetch:
		m.haveState = false
		if e.Err == nil {
			m.forget = nil
		}
	case Rollback:
		m.haveLocal, m.havePeer, m.haveState = false, false, false
		if e.Err == nil {
			m.modified = false
		}
	case DestroySnapshots:
		m.havePeer = false
		if e.Err != nil {
			m.haveLocal = false // some may be gone: list again
			break
		}
		// Its own pruning done: the store holds what it held without
		// these (nothing else changes this replica's replication
		// snapshots meanwhile, NeedsLocal), so no listing is needed: one
		// zfs command less per snapshot interval on each replica.
		gone := map[Snap]bool{}
		for _, sn := range a.Snaps {
			gone[sn] = true
		}
		kept := m.local[:0:0]
		for _, sn := range m.local {
			if !gone[sn] {
				kept = append(kept, sn)
			}
		}
		m.local = kept
	case TakeSnapshot:
		if errors.Is(e.Err, ErrUnchanged) {
			m.ticks = 0 // nothing written: the next interval begins
			break
		}
		m.haveLocal, m.havePeer = false, false
		if e.Err == nil {
			m.ticks = 0
			m.modified = false
			if m.releasing {
				m.finalTaken = true
			}
		}
	case StepDown:
		m.haveState = false
		m.roleChanged = true // whatever came of it: the answer may be lost
		switch {
		case e.Err == nil && a.Epoch == 0 && m.finalTaken && m.finalRecorded():
			// The demotion carrying the final snapshot was written but
			// its answer lost: the view confirmed on shows it done.
			m.releasing, m.released = false, true
		case (e.Err == nil && a.Epoch == 0 || errors.Is(e.Err, ErrFenced)) && m.finalTaken:
			// Another primary took over before the final snapshot was
			// recorded: the term ended, the last writes did not move.
			m.releasing = false
			m.releaseLost = fmt.Sprintf("a takeover ended this primary's term before its final snapshot %s was recorded: the writes it holds are not the volume's", SnapshotName(m.newestLocal()))
		case e.Err == nil || errors.Is(e.Err, ErrFenced):
			// Fenced: another primary took over; nothing to hand over.
			m.releasing, m.released = false, true
		case errors.Is(e.Err, ErrStaleView):
			m.finalTaken = false // a final snapshot of the right term first
		}
	case LeaveVolume:
		m.haveState = false
		if e.Err == nil {
			m.left = true
		}
	case BecomePrimary:
		m.haveState = false
		m.roleChanged = true // whatever came of it: the answer may be lost
		if e.Err == nil && m.acquiring {
			m.acquiring, m.acquired = false, true
			if self, _ := m.state.Replica(m.cfg.Self); !m.isPrimary(self) {
				// Promote wrote an epoch above the view decided on: a
				// lagging read from before it is older and ignored.
				m.seenEpoch = max(m.seenEpoch, m.state.Epoch+1)
			}
			m.ticks = 0 // the new term's first snapshot comes an interval later
		}
	case Alert:
		switch {
		case a.Reason == m.releaseLost:
			m.releaseAlerted = a.Reason
		case a.Event == CopyCannotGrow:
			m.growing.alerted = a.Reason
		case a.Event == CopyCannotConform:
			m.conforming.alerted = a.Reason
		default:
			m.alerted = a.Reason
		}
	case Grow:
		m.growing.done(e.Err, fmt.Sprintf("this copy cannot grow to the volume's size, %d bytes (it is %d): %v", a.Bytes, m.capacity, e.Err))
		if e.Err == nil {
			m.capacity = a.Bytes
		}
	case Conform:
		m.conforming.done(e.Err, fmt.Sprintf("this copy cannot take the volume's properties %v: %v", a.Properties, e.Err))
		if e.Err == nil {
			props := make(map[string]string, len(m.props)+len(a.Properties))
			maps.Copy(props, m.props)
			maps.Copy(props, a.Properties)
			m.props = props
		}
	}
}

func (m *Machine) forgetTarget(t Snap) {
	if t.Number != 0 {
		m.forget = &t
	}
}

func (m *Machine) newestLocal() Snap {
	if len(m.local) == 0 {
		return Snap{}
	}
	return m.local[len(m.local)-1]
}

// finalRecorded: the view shows this replica's own demotion done, with
// its newest snapshot (the final one) as its entry: still the state's
// primary (no takeover since), inactive, holding exactly that snapshot.
func (m *Machine) finalRecorded() bool {
	self, ok := m.state.Replica(m.cfg.Self)
	return ok && !self.Active && m.state.Primary == m.cfg.Self && len(m.local) > 0 && self.Holds() == m.newestLocal()
}

// ReleaseLost says why a release ended without its final snapshot being
// recorded ("" when it did not): a takeover fenced this primary first.
func (m *Machine) ReleaseLost() string { return m.releaseLost }

func (m *Machine) avoidPeer(n Node) {
	if m.avoid == nil {
		m.avoid = map[Node]bool{}
	}
	m.avoid[n] = true
}

// Released reports whether a Release finished: the final snapshot is
// recorded and this replica is no longer the active primary.
func (m *Machine) Released() bool { return m.released }

// Left reports whether the replica left the list: its copy may go.
func (m *Machine) Left() bool { return m.left }

// Acquired reports whether an Acquire finished: this replica became (or
// already was) the active primary by a compare-and-swap on the newest
// state, and no Release came since. The volume may be mounted read/write.
func (m *Machine) Acquired() bool { return m.acquired }

// Acquiring reports whether an Acquire is under way and, from the last
// view, what it waits for ("" when nothing but its own next step).
func (m *Machine) Acquiring() (bool, string) {
	if !m.acquiring {
		return false, ""
	}
	if m.terminating {
		return true, "the replica is leaving the volume"
	}
	if !m.haveState {
		return true, ""
	}
	for _, r := range m.state.Replicas {
		if r.Active && r.Node != m.cfg.Self {
			return true, fmt.Sprintf("%s is the active primary of epoch %d", r.Node, m.state.Epoch)
		}
	}
	if len(m.state.Awaiting) > 0 {
		return true, fmt.Sprintf("the volume's state was rebuilt from its copies: waiting for %v to say what they hold", m.state.Awaiting)
	}
	self, _ := m.state.Replica(m.cfg.Self)
	if self.OnFencedBranch() {
		return true, fmt.Sprintf("its copy is on the branch a takeover of epoch %d left: it resyncs once a snapshot of that epoch or later exists", self.Forked.Epoch)
	}
	if n, ok := m.state.NewestReplica(); ok && newerReplica(n, self) {
		return true, fmt.Sprintf("catching up: holds snapshot %d of epoch %d, %s holds %d of epoch %d", self.Snapshot, self.SnapshotEpoch, n.Node, n.Snapshot, n.SnapshotEpoch)
	}
	return true, ""
}

// Next returns the next action, or false when there is nothing to do (or
// an action is outstanding, or the machine waits for a read).
func (m *Machine) Next() (Action, bool) {
	if m.outstanding != nil || m.backoff || !m.haveLocal || m.left {
		return nil, false
	}
	var a Action
	switch {
	case m.stale:
		a = m.decideStale()
	case m.haveState:
		a = m.decide()
	default:
		return nil, false
	}
	if a == nil {
		m.settled = true
		return nil, false
	}
	m.outstanding = a
	return a, true
}

// Wake says when the machine next needs a fresh view (Observed and, if
// NeedsLocal, LocalRead) although neither the shared state nor the local
// store changed: after that many ticks, or, when negative, only once one
// of them changed. An idle secondary and an idle primary between two
// snapshots then cost no read at all; the caller re-reads on a change it
// is told of (a watch) and after Wake's ticks. Anything but a settled
// machine (the last Next found nothing to do on a complete view and no
// event but ticks came since) answers 0: decide again at the next tick, as
// a machine waiting for a retry must (a release, a termination or a
// forgotten fetch always has an action, so it never settles).
func (m *Machine) Wake() int {
	if m.left {
		return -1 // nothing more to decide, whatever changes
	}
	if !m.settled {
		return 0
	}
	self, _ := m.state.Replica(m.cfg.Self)
	if m.isPrimary(self) {
		// Ticks only change the primary's decision: its next snapshot.
		return max(0, m.SnapshotEvery()-m.ticks)
	}
	return -1
}

// NeedsCapacity reports whether the next local read must read the copy's
// size: the volume's is known and the copy's is not (never read, or the
// copy made again by a full receive since). Only then does a listing
// cost a read of the size.
//
// The copy's properties are read with its size, under the same rule: a
// state that names Properties needs them known too.
func (m *Machine) NeedsCapacity() bool {
	return (m.state.CapacityBytes > 0 || len(m.state.Properties) > 0) && !m.capacityKnown
}

// NeedsLocal reports whether the machine's view of the local store is
// stale (never read, changed by its own action since, or contradicted by
// its entry in the shared state): the caller lists the store before the
// next decision. Only the machine's own actions change a replica's
// replication snapshots while its entry agrees with them; another leaver
// (the daemon's, for a copy it found without a pod) changes the entry
// first.
func (m *Machine) NeedsLocal() bool { return !m.haveLocal }

// growRetryTicks is how long a copy that could not grow waits before
// trying again.
const growRetryTicks = 64

// grow decides the copy's growth to the volume's size, or the alert of a
// growth that failed (once). A copy larger than the volume is left alone
// (a shrink is never Ferry's), and so is a volume whose size the state
// does not tell (0: made before it did).
func (m *Machine) grow() (Action, bool) {
	want := m.state.CapacityBytes
	if want <= 0 || !m.hasData || !m.capacityKnown || m.capacity >= want {
		return nil, false
	}
	if alert, ok := m.growing.next(CopyCannotGrow); alert != nil || !ok {
		return alert, alert != nil
	}
	return Grow{Bytes: want}, true
}

// conform decides the copy's properties (those of State.Properties it
// does not hold), or the alert of a Conform that failed (once).
func (m *Machine) conform() (Action, bool) {
	if len(m.state.Properties) == 0 || !m.hasData || !m.capacityKnown {
		return nil, false
	}
	var differ map[string]string
	for k, v := range m.state.Properties {
		if m.props[k] != v {
			if differ == nil {
				differ = map[string]string{}
			}
			differ[k] = v
		}
	}
	if differ == nil {
		return nil, false
	}
	if alert, ok := m.conforming.next(CopyCannotConform); alert != nil || !ok {
		return alert, alert != nil
	}
	return Conform{Properties: differ}, true
}

func (m *Machine) decide() Action {
	self, listed := m.state.Replica(m.cfg.Self)
	newest := Snap{}
	if len(m.local) > 0 {
		newest = m.local[len(m.local)-1]
	}
	if m.releasing {
		// A release finishes before anything else, leaving included: an
		// active primary may not leave, and its last writes must be
		// snapshotted and recorded.
		switch {
		case !m.isPrimary(self):
			// Nothing to hand over, as far as this view tells: confirmed
			// on the newest state (the view may lag).
			return StepDown{}
		case !m.finalTaken || newest.Epoch != m.state.Epoch:
			return TakeSnapshot{Number: m.state.NextSnapshot(m.local), Epoch: m.state.Epoch}
		default:
			return StepDown{Epoch: m.state.Epoch, Final: newest}
		}
	}
	if m.releaseLost != "" && m.releaseAlerted != m.releaseLost {
		return Alert{Reason: m.releaseLost}
	}
	if m.forget != nil {
		return ForgetFetch{Target: *m.forget}
	}
	if m.terminating {
		holds := Holding{Newest: newest, HasData: m.hasData, Unchanged: m.unchanged}
		keep := ""
		if !m.volumeGone {
			keep = KeepBeforeLeaving(m.state, holds)
		}
		return LeaveVolume{Holds: holds, VolumeGone: m.volumeGone, KeepAs: keep}
	}
	probe := self
	probe.Snapshot, probe.SnapshotEpoch = newest.Number, newest.Epoch
	ready := IsReady(m.state, probe, m.cfg.AllowedLag)
	if !listed || self.Snapshot != newest.Number || self.SnapshotEpoch != newest.Epoch || self.SnapshotGUID != newest.GUID || self.Ready != ready {
		return ReportSnapshot{Snap: newest, Ready: ready}
	}
	if len(m.state.Awaiting) > 0 {
		// A rebuilt state still awaits nodes that may hold newer copies:
		// nothing is promoted, fetched, rolled back or discarded until
		// the survey ends (a change wakes the machine).
		return nil
	}
	if g, ok := m.grow(); ok {
		return g
	}
	if c, ok := m.conform(); ok {
		return c
	}
	if m.acquiring && (m.isPrimary(self) || m.mayPromote(self)) {
		return BecomePrimary{}
	}
	if m.isPrimary(self) {
		if m.ticks >= m.SnapshotEvery() {
			return TakeSnapshot{Number: m.state.NextSnapshot(m.local), Epoch: m.state.Epoch, Periodic: true}
		}
		return m.retention()
	}
	if m.modified && len(m.local) > 0 {
		if m.state.Primary == m.cfg.Self {
			// The last primary of the current epoch: its changes are the
			// volume's newest data. They are snapshotted, never discarded.
			return TakeSnapshot{Number: m.state.NextSnapshot(m.local), Epoch: m.state.Epoch}
		}
		return Rollback{To: newest, Reason: "changed since its newest snapshot while not the primary of the current epoch: the changes are not the volume's",
			KeepAs: m.keepAs(newest, nil, true)}
	}
	src, ok := ChooseSource(m.state, m.cfg.Self, m.avoid)
	if ok && m.avoid[src.Node] {
		m.avoid = nil // every replica as new as the best failed once: start over
	}
	if !ok {
		return m.retention()
	}
	if m.hasData && len(m.local) == 0 {
		// A dataset with no replication snapshot may hold writes nobody
		// else has: nothing is received over it.
		reason := "holds data without any replication snapshot while another replica has newer ones: nothing is received over it"
		if m.alerted != reason {
			return Alert{Reason: reason}
		}
		return nil
	}
	if !m.havePeer || m.peer != src.Node {
		return ReadPeer{Peer: src.Node}
	}
	p := PlanTransfer(m.local, m.plannable(src))
	switch p.Kind {
	case PlanFull:
		return Fetch{Peer: src.Node, Target: p.Target}
	case PlanIncremental:
		base := p.Base
		return Fetch{Peer: src.Node, Base: &base, Target: p.Target}
	case PlanRollbackIncremental:
		return Rollback{To: p.Base, Discard: p.Discard, Reason: p.Reason, KeepAs: m.keepAs(p.Base, p.Discard, false)}
	case PlanReplace:
		return Replace{Peer: src.Node, Target: p.Target, Discard: p.Discard, Reason: p.Reason, KeepAs: m.keepAs(Snap{}, p.Discard, false)}
	case PlanConflict:
		if m.alerted != p.Reason {
			return Alert{Reason: p.Reason}
		}
	}
	return m.retention()
}

// keepAs names the copy a rollback to `to` (or a replacement: to is
// zero) keeps aside before it discards `discard` and, when changed,
// changes never snapshotted; "" when nothing is kept. The rule is
// fencedCopy's, on this machine's view of the volume's epoch.
func (m *Machine) keepAs(to Snap, discard []Snap, changed bool) string {
	return fencedCopy(m.state.Epoch, to, discard, changed)
}

// plannable is what the source holds that may be fetched: never a fenced
// primary's history, and never a snapshot of an ended epoch newer than the
// source's own entry (one it took on a lagging view and never reported):
// both are rolled back at the source, under the transfer.
func (m *Machine) plannable(src Replica) []Snap {
	out := make([]Snap, 0, len(m.peerSnaps))
	for _, s := range m.peerSnaps {
		if s.Epoch < m.state.Epoch && (m.state.Fenced(s) || s.Newer(src.Holds())) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// mayPromote: as this view tells, no other replica is active and none
// holds a newer snapshot than this replica's entry (which matches its
// store: reported first), and nothing unsnapshotted waits to be rolled
// back, and its copy is not on a fenced branch. Promote checks all but
// the unsnapshotted changes again on the newest state.
func (m *Machine) mayPromote(self Replica) bool {
	if m.modified || self.OnFencedBranch() {
		return false
	}
	for _, r := range m.state.Replicas {
		if r.Active && r.Node != m.cfg.Self {
			return false
		}
	}
	n, ok := m.state.NewestReplica()
	return !ok || !newerReplica(n, self)
}

// isPrimary: this replica is the active primary of the volume's epoch.
func (m *Machine) isPrimary(self Replica) bool {
	return m.state.Primary == m.cfg.Self && self.Active
}

func (m *Machine) retention() Action {
	if d := Retain(m.local, m.state, m.cfg.Keep); len(d) > 0 {
		return DestroySnapshots{Snaps: d}
	}
	return nil
}
