package replica

import "errors"

// What a replica may do while the shared state cannot be read (the API
// server is away, or this node is cut off from it): the loss bound of one
// snapshot interval must hold through the outage, so the primary keeps
// snapshotting and the secondaries keep fetching from it over the peer
// service; nothing that needs a compare-and-swap happens until the state
// reads again. ARCHITECTURE 5.6 ("On a stale view") gives the reasoning.
//
// The machine decides on its last view, marked stale (StateUnreadable),
// by these rules only:
//
//   - The active primary of the last view's epoch takes its periodic (or
//     requested, or final) snapshot, numbered above every number in that
//     view (reports and fetch targets) and in its own store, so numbers
//     never repeat. A snapshot only records what the primary already
//     holds: it is safe whenever the primary's guard lets it write, and
//     after a fence it holds the writes made before the fence. When this
//     node was cut off while a takeover happened elsewhere, those
//     snapshots are of the ended epoch: the fenced-branch rules keep them
//     aside and never make them history (Report marks any replica that
//     reports one, fencedCopy keeps it before a rollback).
//   - A secondary fetches from the active primary of the last view, and
//     only incrementally: that peer's newest snapshot is of the view's
//     epoch and lies on top of the newest snapshot both hold, with nothing
//     local after it. Never a full stream, a rollback or a replacement:
//     those discard data or need the shared state's compare-and-swap
//     first. The target is not recorded (RecordFetch is a compare-and-
//     swap): it stays at the sender because a primary on a stale view
//     prunes nothing the view did not already let go (RetainStale).
//   - Retention keeps every snapshot not older than the oldest one any
//     replica last reported or was fetching: the secondaries' new bases,
//     fetched during the outage, are unknown until they report.
//   - Nothing else: no report, no recorded fetch, no rollback, replace,
//     promotion, step-down or leave. A release takes its final snapshot
//     and waits; a termination waits. When the state reads again the
//     replica reports what it holds before anything else (decide).
//
// A view that the machine's own compare-and-swap changed as to who is
// the primary (a promotion, a step-down) is not decided on: the machine
// waits for a fresh read.

// ErrViewReturned: a peer action decided on a stale view (ReadPeer,
// Fetch) was stopped because the shared state reads again: no failure (no
// back-off, the peer is not avoided); the replica reports what it holds
// before anything else, so that a takeover decided after the outage sees
// what it fetched during it.
var ErrViewReturned = errors.New("the shared state reads again: an action decided on a stale view stopped")

// StateUnreadable: the shared state could not be read (any error but its
// absence). The machine decides on its last view, marked stale, by the
// rules above, until the next Observed.
type StateUnreadable struct{}

func (StateUnreadable) event() {}

// OnStaleView reports whether the machine decides on a stale view: the
// last read of the shared state failed and an earlier one succeeded. The
// caller runs the peer actions decided then (ReadPeer, Fetch) only while
// the state stays unreadable: once it reads again, the replica reports
// first (see ErrViewReturned).
func (m *Machine) OnStaleView() bool { return m.stale }

// decideStale is decide's counterpart on a stale view.
func (m *Machine) decideStale() Action {
	if m.roleChanged || m.terminating || len(m.state.Awaiting) > 0 {
		return nil // a rebuilt state's survey: nothing moves (Rediscover)
	}
	self, listed := m.state.Replica(m.cfg.Self)
	if !listed {
		return nil
	}
	newest := m.newestLocal()
	if m.isPrimary(self) {
		switch {
		case m.releasing && (!m.finalTaken || newest.Epoch != m.state.Epoch):
			return TakeSnapshot{Number: m.state.NextSnapshot(m.local), Epoch: m.state.Epoch}
		case !m.releasing && m.ticks >= m.SnapshotEvery():
			return TakeSnapshot{Number: m.state.NextSnapshot(m.local), Epoch: m.state.Epoch, Periodic: true}
		}
		return m.retentionStale()
	}
	if f, ok := m.staleFetch(self); ok {
		return f
	}
	return m.retentionStale()
}

// staleFetch is the fetch a secondary may make on a stale view, if any:
// from the last view's active primary, incrementally, to a snapshot of
// that view's epoch (StaleFetch).
func (m *Machine) staleFetch(self Replica) (Action, bool) {
	if m.modified || m.releasing || self.OnFencedBranch() || len(m.local) == 0 {
		return nil, false
	}
	src, ok := m.state.Replica(m.state.Primary)
	if !ok || !src.Active || src.Node == m.cfg.Self {
		return nil, false
	}
	if !m.havePeer || m.peer != src.Node {
		return ReadPeer{Peer: src.Node}, true
	}
	p, ok := StaleFetch(m.state, m.local, m.plannable(src))
	if !ok {
		return nil, false
	}
	base := p.Base
	return Fetch{Peer: src.Node, Base: &base, Target: p.Target, Stale: true}, true
}

// StaleFetch is the rule for a secondary's transfer on a stale view last
// (local: what it holds; primary: what the last view's active primary
// lists): allowed only as an incremental (PlanTransfer's, nothing local
// after the base, so nothing is discarded) to a snapshot of last's epoch,
// the primary's own term. Anything else waits for the shared state.
func StaleFetch(last State, local, primary []Snap) (Plan, bool) {
	p := PlanTransfer(local, primary)
	if p.Kind != PlanIncremental || p.Target.Epoch != last.Epoch {
		return p, false
	}
	return p, true
}

func (m *Machine) retentionStale() Action {
	if d := RetainStale(m.local, m.state, m.cfg.Keep); len(d) > 0 {
		return DestroySnapshots{Snaps: d}
	}
	return nil
}

// RetainStale is Retain on a stale view last: of what Retain would
// destroy, only the snapshots older than the oldest one any replica of
// last reported or was fetching. The secondaries' bases move during the
// outage (they fetch) and nobody can tell by how much: everything from the
// oldest base the view names onwards stays, so a secondary's next
// incremental always finds its base, and a primary's snapshot is never
// pruned before a replica that fetched it reported. Nothing is destroyed
// when the view names no snapshot.
func RetainStale(local []Snap, last State, keep int) []Snap {
	var floor Snap
	found := false
	for _, r := range last.Replicas {
		for _, s := range []Snap{r.Holds(), r.Fetching} {
			if s.Number != 0 && (!found || floor.Newer(s)) {
				floor, found = s, true
			}
		}
	}
	if !found {
		return nil
	}
	var out []Snap
	for _, s := range Retain(local, last, keep) {
		if floor.Newer(s) {
			out = append(out, s)
		}
	}
	return out
}
