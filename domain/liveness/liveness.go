// Package liveness decides, from times each node measures on its own
// monotonic clock, whether a node may keep writing, whether it must fence
// its primaries, whether an observer may take another node for lost, and
// which survivor takes a lost primary's volume over (seed 000 with the
// node-loss stage: each daemon renews a Lease of its own node).
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
//     Duration + Margin since the observer first saw its current value;
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
// holds its lease, or while every node in takers (every node that could
// take one of its volumes over: TakersOf) promised past now. Otherwise
// it must fence them: stop their writers, then unmount.
func Decide(st Standing, takers []replica.Node) Verdict {
	if st.Now < st.LeaseUntil {
		return Verdict{MayWrite: true, Until: st.LeaseUntil, Reason: "the node's lease is held"}
	}
	if len(takers) == 0 {
		// Nobody can take over: no second writer can appear; a primary
		// without a lease keeps its single copy writable.
		return Verdict{MayWrite: true, Until: st.Now, Reason: "no other node holds a copy that could take over"}
	}
	until := time.Duration(1<<63 - 1)
	for _, t := range takers {
		best := time.Duration(-1)
		for _, p := range st.Promises {
			if p.From == t && p.Until > best {
				best = p.Until
			}
		}
		if best <= st.Now {
			return Verdict{Reason: fmt.Sprintf("the node's lease ran out and %s, which could take over, has not promised not to", t)}
		}
		until = min(until, best)
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

// TakersOf are the nodes that could take over from lost in s: every
// listed replica but lost's that holds a snapshot. A primary without a
// lease needs each one's promise to keep writing.
func TakersOf(s replica.State, lost replica.Node) []replica.Node {
	var out []replica.Node
	for _, r := range s.Replicas {
		if r.Node != lost && r.Snapshot != 0 {
			out = append(out, r.Node)
		}
	}
	return out
}

// Successor is the node whose daemon takes s over from its lost primary:
// the replica replica.Takeover would accept (ready within lag, holding
// the newest snapshot among the others, what they are receiving counted),
// ties broken by node name so that every observer names the same one.
// False when none would be accepted (the volume waits for lost to return,
// or for an operator).
func Successor(s replica.State, lost replica.Node, lag uint64) (replica.Node, bool) {
	var nodes []replica.Node
	for _, r := range s.Replicas {
		nodes = append(nodes, r.Node)
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		t := cloneState(s)
		if n != lost && replica.Takeover(&t, n, lost, lag) == nil {
			return n, true
		}
	}
	return "", false
}

func cloneState(s replica.State) replica.State {
	s.Replicas = append([]replica.Replica(nil), s.Replicas...)
	return s
}
