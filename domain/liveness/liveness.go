// Package liveness decides, from times each node measures on its own
// monotonic clock, whether a node may keep writing, whether it must fence
// its primaries, whether an observer may take another node for lost, and
// which survivor takes a lost primary's volume over, why the guard fences
// a copy here and when it gives its pods back (fence.go), what a survivor
// does around a takeover (aftermath.go), when a returned node lifts its
// own fenced taint (taint.go), and the node's write permit, on which a
// volume manager's watchdog fences its primary when the daemon is down
// (watchdog.go). Seed 000's fencing, with each daemon renewing a Lease of
// its own node.
//
// No clock is shared: every instant here is a duration on the clock of
// the node deciding (time since its process started, say), and a span
// measured on another node is never compared with one measured here. The
// rules only ever compare a node's own instants, with a margin for
// clock-rate drift and delays:
//
//   - a node holds its lease until Duration - Margin after it SENT the last
//     renewal that succeeded (the server accepted it no earlier, so every
//     observer sees it valid at least that long);
//   - an observer takes a node for lost once its lease has not changed for
//     Duration + Margin since the observer first saw its current value,
//     the longer of its own Duration and the one the node declares
//     (Observer.ReadDeclared: nodes configured apart);
//   - between the two lie 2 Margin at least: a node stops writing before
//     anyone may take its volumes over.
//
// When the API server is away (a control-plane upgrade), a primary may
// keep writing on promises instead: every node that could take one of its
// volumes over promised, over the peer channel, not to before an instant
// the promise names on the primary's clock (its request's send time plus
// the promised span), and a node promises only while it hears from the
// primary's node. Like the replica machine, these are pure functions:
// races are replayed in plain tests.
package liveness

import (
	"fmt"
	"slices"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Config is the lease's timing: renewals every Renew, valid for Duration;
// Margin absorbs clock-rate drift and request delays on both sides.
type Config struct {
	Renew, Duration, Margin time.Duration
}

// Validate refuses timings under which the rules cannot hold: a node must
// renew well within the time it holds its lease.
func (c Config) Validate() error {
	switch {
	case c.Renew <= 0 || c.Duration <= 0 || c.Margin <= 0:
		return fmt.Errorf("lease renew %s, duration %s and margin %s must all be positive", c.Renew, c.Duration, c.Margin)
	case c.Renew >= c.Duration-c.Margin:
		return fmt.Errorf("lease renew %s must be shorter than duration %s minus margin %s: the node would fence between two renewals", c.Renew, c.Duration, c.Margin)
	}
	return nil
}

// Held is how long a node holds its lease after sending a renewal that
// succeeded: until sent + Duration - Margin, on its own clock.
func (c Config) Held(sent time.Duration) time.Duration { return sent + c.Duration - c.Margin }

// Lost reports whether an observer may take a node for lost: its lease's
// value has not changed since the observer first saw it at seen (the
// observer's clock) for Duration + Margin.
func (c Config) Lost(seen, now time.Duration) bool { return now-seen >= c.Duration+c.Margin }

// Promise is a node's word that it will not take over the asking node's
// volumes before Until (on the asking node's clock: the request's send
// time plus the span promised).
type Promise struct {
	From  replica.Node
	Until time.Duration
}

// Standing is what a node knows, at Now on its clock, of its right to
// write: when its lease is held until (zero: never renewed), and the
// promises it holds.
type Standing struct {
	Now        time.Duration
	LeaseUntil time.Duration
	Promises   []Promise
}

// Verdict says whether a node's primaries may keep writing, and why.
type Verdict struct {
	MayWrite bool
	// Until is when the verdict must be taken again at the latest: the
	// end of the lease or of the first promise to run out.
	Until  time.Duration
	Reason string
}

// Decide says whether the primaries of a node may keep writing: while it
// holds its lease, or while every node in takers (every node that may
// take one of its volumes over: the takers its Ledger acknowledged)
// promised past now, until the later of the two. Otherwise it must fence
// them: stop their writers, then unmount.
//
// A promise counts while the lease still runs too: its Until is then the
// later end, so a permit published while the lease holds already carries
// the promises that outlast it (a watchdog reading it does not see a
// deadline pass in the instant between the lease's end and the guard's
// next verdict, which would fence a primary that may write on).
func Decide(st Standing, takers []replica.Node) Verdict {
	held := st.Now < st.LeaseUntil
	if len(takers) == 0 {
		if held {
			return Verdict{MayWrite: true, Until: st.LeaseUntil, Reason: "the node's lease is held"}
		}
		// Nobody can take over: no second writer can appear; a primary
		// without a lease keeps its single copy writable.
		return Verdict{MayWrite: true, Until: st.Now, Reason: "no other node holds a copy that could take over"}
	}
	until := time.Duration(1<<63 - 1)
	missing := replica.Node("")
	for _, t := range takers {
		best := time.Duration(-1)
		for _, p := range st.Promises {
			if p.From == t && p.Until > best {
				best = p.Until
			}
		}
		if best <= st.Now {
			missing = t
			break
		}
		until = min(until, best)
	}
	switch {
	case held && missing == "" && until > st.LeaseUntil:
		return Verdict{MayWrite: true, Until: until, Reason: fmt.Sprintf("the node's lease is held, and every node that could take over promised not to beyond it (%d)", len(takers))}
	case held:
		return Verdict{MayWrite: true, Until: st.LeaseUntil, Reason: "the node's lease is held"}
	case missing != "":
		return Verdict{Reason: fmt.Sprintf("the node's lease ran out and %s, which could take over, has not promised not to", missing)}
	}
	return Verdict{MayWrite: true, Until: until, Reason: fmt.Sprintf("the node's lease ran out, but every node that could take over promised not to (%d)", len(takers))}
}

// MayPromise reports whether a node may promise not to take over a
// primary node's volumes: only while it hears from that node, its last
// word received at heard (this node's clock) no longer ago than
// Duration - Margin, and only for a span that ends before it would take
// that node for lost (Lost measures Duration + Margin from its lease's
// last change, which the primary keeps renewing or not at all).
func (c Config) MayPromise(heard, now time.Duration) (bool, time.Duration) {
	if now-heard >= c.Duration-c.Margin {
		return false, 0
	}
	return true, c.Duration - c.Margin
}

// Successor is the node whose daemon takes s over from its lost primary:
// the replica replica.Takeover would accept (acknowledged by the lost
// primary as a taker, ready within lag, holding
// the newest snapshot among the others, not on a fenced branch), or, when
// lost released the volume holding the only copy of its final snapshot,
// replica.TakeoverReleased; ties broken by node name so that every
// observer names the same one. False when none would be accepted (the
// volume waits for lost to return, or for an operator).
func Successor(s replica.State, lost replica.Node, lag uint64) (replica.Node, bool) {
	return successor(s, lost, []replica.Node{lost}, lag)
}

// successor is Successor never naming a node of down (lost among them):
// a lost node cannot take over, although its entry still counts (a lost
// secondary holding newer snapshots still makes Takeover refuse: those
// writes are not given up without an operator).
func successor(s replica.State, lost replica.Node, down []replica.Node, lag uint64) (replica.Node, bool) {
	var nodes []replica.Node
	for _, r := range s.Replicas {
		nodes = append(nodes, r.Node)
	}
	slices.Sort(nodes)
	p, _ := s.Replica(lost)
	for _, n := range nodes {
		if slices.Contains(down, n) {
			continue
		}
		t := cloneState(s)
		var err error
		if p.Active {
			err = replica.Takeover(&t, n, lost, lag)
		} else {
			_, err = replica.TakeoverReleased(&t, n, lost, lag)
		}
		if err == nil {
			return n, true
		}
	}
	return "", false
}

func cloneState(s replica.State) replica.State {
	s.Replicas = append([]replica.Replica(nil), s.Replicas...)
	return s
}

// ResumedSince reports whether lost, the primary a takeover is about to
// replace, resumed writing (replica.Resume) since before: its counter in
// now differs from the one in before, a state read before the lease
// verdict that judged lost (no entry in before counts as 0: any resume
// ever). The takeover must then be refused: lost renewed after that
// verdict and its pods may write again.
func ResumedSince(before, now replica.State, lost replica.Node) bool {
	b, _ := before.Replica(lost)
	n, _ := now.Replica(lost)
	return n.Resumed != b.Resumed
}

// Observer is what one node has seen of every other node's lease, on its
// own clock: when it first saw each lease's current value, and the
// promises it gave. A lease is only ever compared with itself: a value
// that has not changed for Duration + Margin of this observer's time
// means its node stopped renewing (Config.Lost).
//
// An observer that could not read the leases (its own link to the API
// server broke) knows nothing of that time: every lease's age restarts at
// the next read that succeeds (Read after Blind), so that a node that
// could not renew during the same outage gets its full duration again
// once both are back.
type Observer struct {
	cfg      Config
	self     replica.Node
	seen     map[replica.Node]sighting
	promised map[replica.Node]time.Duration
	// inherited: nobody is taken for lost before it (Inherit): the
	// promises this node's previous daemon gave may run until then.
	inherited time.Duration
	blind     bool
	off       []replica.Node // declared shut down (OutOfService)
}

type sighting struct {
	value string
	at    time.Duration
	// renewed: the value changed since the observer first saw the lease
	// (after its last blind spell), the last time at at.
	renewed bool
	// hold is how long this value may hold its node's lease: the
	// observer's Duration, or longer where the node declares a longer one
	// now or declared one with its previous value (see ReadDeclared).
	hold time.Duration
	// declared is the duration the node declared with this value (0:
	// none).
	declared time.Duration
	// until is the latest instant (this observer's clock) up to which any
	// value seen of this lease may hold it: at + hold, or later where an
	// earlier value, on a longer declaration, still ran (kept across value
	// changes and blind spells). The node is lost no earlier than until +
	// Margin.
	until time.Duration
}

// Lease is one node's lease as read: Value changes with every renewal;
// Duration is what the node declares it holds its lease for (0: not
// declared: the observer's own Duration).
type Lease struct {
	Value    string
	Duration time.Duration
}

// NewObserver returns the observer of node self (never lost to itself).
func NewObserver(cfg Config, self replica.Node) *Observer {
	// Blind until its first read: a daemon that starts may start as the
	// API server comes back from an outage; the leases it first reads
	// hold AfterOutage at least.
	return &Observer{cfg: cfg, self: self, seen: map[replica.Node]sighting{}, promised: map[replica.Node]time.Duration{}, blind: true}
}

// Read records one successful read of the leases at now: values maps
// each node to its lease's value (anything that changes with every
// renewal). A lease missing from a read keeps its age: a node whose lease
// was removed does not renew either.
func (o *Observer) Read(now time.Duration, values map[replica.Node]string) {
	o.ReadSince(now, now, values)
}

// ReadSince records one successful read begun at start and answered at
// now. A read that took longer than a renewal period (a node's renewal
// times out then) counts as a blind spell ended by its answer (every
// lease's age restarts at now): an API server that held the read
// (stopped, overloaded) held the nodes' renewals too, so a lease seen
// unchanged across it tells nothing of its node. Reads that are merely
// slow, shorter than a renewal, count as they are: were each counted
// blind, no node would ever be taken for lost.
func (o *Observer) ReadSince(start, now time.Duration, values map[replica.Node]string) {
	leases := make(map[replica.Node]Lease, len(values))
	for n, v := range values {
		leases[n] = Lease{Value: v}
	}
	o.ReadDeclared(start, now, leases)
}

// ReadDeclared is ReadSince with the duration each node declares with its
// lease. A node is taken for lost only after the longer of the observer's
// Duration and its own: nodes of two releases (or two configurations)
// side by side during a rolling update never take each other over before
// the other fences (a node holds its lease for its own duration, minus
// the margin, which every node must set alike). A value that comes with a
// shorter declaration than the one before still holds for the longer one:
// the processes that read the earlier one (a daemon just replaced, its
// volume managers' permits) may write on its terms until then.
func (o *Observer) ReadDeclared(start, now time.Duration, leases map[replica.Node]Lease) {
	if now-start > o.cfg.Renew {
		o.blind = true
	}
	for n, l := range leases {
		s, ok := o.seen[n]
		if !ok || s.value != l.Value || o.blind {
			hold := max(o.cfg.Duration, l.Duration)
			if ok {
				hold = max(hold, s.declared)
			}
			if o.blind {
				hold = max(hold, AfterOutage)
			}
			o.seen[n] = sighting{value: l.Value, at: now, renewed: ok && s.value != l.Value && !o.blind, hold: hold, declared: l.Duration,
				until: max(s.until, now+hold)}
		}
	}
	values := leases
	if o.blind {
		for n, s := range o.seen {
			if _, ok := values[n]; !ok {
				s.at, s.renewed, s.until = now, false, max(s.until, now+max(s.hold, AfterOutage))
				o.seen[n] = s
			}
		}
		o.blind = false
	}
}

// AfterOutage is the least a lease seen again after a blind spell (this
// observer's reads failed, or were held: an API server outage) holds,
// whatever the durations: once the API server answers again, the volume
// managers report what they received during the outage within about 3 s
// (a tick, a read bounded by two ticks or 2 s, a compare-and-swap;
// ARCHITECTURE 5.7), and a takeover must decide on those reports, or it
// gives up the outage's snapshots. Sized to the report bound with room,
// not to the lease.
const AfterOutage = 5 * time.Second

// Inherit is what this observer learns of the daemon it replaces on its
// node, at its first read (now): that daemon renewed the node's lease for
// duration (its Lease said so before this one renewed it) and may have
// promised other nodes, on those terms, not to take them over: promises
// kept in its memory only, which ran for at most duration - Margin from
// before now, and which it honoured for 2 Margin more, or for AfterOutage
// and a Margin, the longer (Promise). Nobody is taken for lost before
// they all ended.
func (o *Observer) Inherit(now, duration time.Duration) {
	o.inherited = max(o.inherited, now+max(duration, AfterOutage)+o.cfg.Margin)
}

// Declared is the lease duration a daemon declares in its node's Lease,
// given its own and the one the Lease declared before it first wrote it
// (predecessor), since that first write (wrote: it has written): the
// longer of the two until the predecessor's terms have surely ended (its
// promises, given before that write, ran for at most predecessor -
// Margin and are honoured for 2 Margin more), its own after. So a daemon
// that replaces this one within that time (a crash right after a rolling
// update) still reads the earlier terms in the Lease and waits them out
// (Inherit), however many restarts follow.
func (c Config) Declared(predecessor time.Duration, wrote bool, since time.Duration) time.Duration {
	if predecessor > c.Duration && (!wrote || since < predecessor+c.Margin) {
		return predecessor
	}
	return c.Duration
}

// OutOfService records the nodes an administrator declared shut down
// (Kubernetes' out-of-service taint), as read with the leases: Lost names
// them at once, whatever their lease or a promise says. The declaration
// is the administrator's word that the node runs nothing (as Kubernetes'
// own non-graceful node shutdown relies on it); a node still running
// when so declared may write after its volumes are taken over.
func (o *Observer) OutOfService(nodes []replica.Node) {
	o.off = slices.Clone(nodes)
}

// Blind records a read that failed: the leases' ages restart at the next
// read that succeeds.
func (o *Observer) Blind() { o.blind = true }

// Promise answers node's request, heard at now, for a promise not to take
// its volumes over: given while this observer hears from node (the request
// is that word), for Duration - Margin; the observer then takes node for
// lost no earlier than 2 Margin after that promise's end, whatever its
// lease says (as with the lease: the asking node stops writing, on its own
// clock, 2 Margin before anyone may take it over, for its fence to finish
// and for drift). The span is measured from the asking node's send time on
// its own clock.
func (o *Observer) Promise(node replica.Node, now time.Duration) (bool, time.Duration) {
	ok, span := o.cfg.MayPromise(now, now)
	if slices.Contains(o.Lost(now), node) {
		// Already taken for lost: a takeover may be under way; a promise
		// now would let the node write next to it.
		return false, 0
	}
	if _, known := o.seen[node]; !ok || !known || node == o.self {
		// Only a node whose lease this observer has read: a name nobody
		// holds a lease for gets nothing (and takes no memory here).
		return false, 0
	}
	// Honoured for AfterOutage at least: a node that asks writes on
	// promises because it cannot renew, its copies perhaps cut off from
	// the API server too (a stalled API server replica): their reports of
	// what they fetched meanwhile need that long once it answers again.
	if until := max(now+span+2*o.cfg.Margin, now+AfterOutage+o.cfg.Margin); until > o.promised[node] {
		o.promised[node] = until
	}
	return true, span
}

// Lost lists, sorted, the nodes this observer may take for lost at now:
// seen, not itself, their lease unchanged for Duration + Margin, and no
// promise of this observer's running; or declared out of service. Nothing
// while blind.
func (o *Observer) Lost(now time.Duration) []replica.Node {
	if o.blind {
		return nil
	}
	var out []replica.Node
	for n, s := range o.seen {
		if n == o.self {
			continue
		}
		if slices.Contains(o.off, n) || (now >= o.promised[n] && now >= o.inherited && now >= s.until+o.cfg.Margin) {
			out = append(out, n)
		}
	}
	for _, n := range o.off {
		if _, seen := o.seen[n]; !seen && n != o.self {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NextLoss is the earliest instant after now at which Lost may name a
// node it does not name at now, if the leases read so far do not change:
// a seen node's lease unchanged for Duration + Margin, and no promise of
// this observer's running. A reader that reads again then, rather than at
// its next period, takes a lost node for lost on time (its reads also
// see every renewal, which defers it). False when nothing is pending
// (blind: every age restarts at the next read).
func (o *Observer) NextLoss(now time.Duration) (time.Duration, bool) {
	if o.blind {
		return 0, false
	}
	var next time.Duration
	found := false
	for n, s := range o.seen {
		if n == o.self || slices.Contains(o.off, n) {
			continue
		}
		at := max(s.until+o.cfg.Margin, o.promised[n], o.inherited)
		if at <= now {
			continue // lost already (or a promise ran out at now)
		}
		if !found || at < next {
			next, found = at, true
		}
	}
	return next, found
}

// Takeover is one volume a node must take over: its primary's node is
// lost and the node is its Successor. Released: that primary had released
// the volume holding the only copy of its final snapshot
// (replica.TakeoverReleased, which gives that snapshot up).
type Takeover struct {
	Volume   replica.State
	Lost     replica.Node
	Released bool
}

// Takeovers lists the volumes of states that self takes over now that
// the nodes in lost are lost: those whose primary is active on a lost
// node, or released there with the only copy of its final snapshot, and
// whose Successor is self. A volume being deleted is left alone.
func Takeovers(states []replica.State, lost []replica.Node, self replica.Node, lag uint64) []Takeover {
	var out []Takeover
	for _, s := range states {
		if s.Deleting || !slices.Contains(lost, s.Primary) {
			continue
		}
		p, ok := s.Replica(s.Primary)
		if !ok {
			continue
		}
		if n, ok := successor(s, s.Primary, lost, lag); ok && n == self {
			out = append(out, Takeover{Volume: s, Lost: s.Primary, Released: !p.Active})
		}
	}
	return out
}
