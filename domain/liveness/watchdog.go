package liveness

import (
	"fmt"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
)

// The watchdog. Fencing must not hinge on the daemon alone: a node whose
// daemon is down (a crash loop, an out-of-memory kill, an upgrade pulling
// its image) renews no lease and has no guard, so once the other nodes
// take it for lost a survivor takes its volumes over while its pods write
// on. So the guard publishes, on its node only, a Permit: until when each
// primary here may write. The volume manager of a primary (whatever lets
// the primary write) watches it and fences its own volume once its
// deadline has passed (Watch), with or without a daemon.
//
// Why a watchdog fencing on Watch's verdict stops the writes before any
// survivor may take over:
//
//   - Every finite deadline Grant publishes is the guard's own verdict
//     (Decide): the end of the node's lease, Held = sent + Duration -
//     Margin, or of the first taker's promise to run out, or the instant
//     the guard decided to fence. An observer takes the node for lost no
//     earlier than Duration + Margin after it first saw that renewal (no
//     earlier than it was sent), and a promise's giver no earlier than 2
//     Margin after it ends (Observer.Promise): the deadline lies at least
//     2 Margin before the earliest takeover, as the guard's own fence.
//   - The permit is written as instants of the node's own clock, shared by
//     every process there (the adapter reads it before the guard's, so a
//     converted deadline is never later than the guard's), and that clock
//     counts time asleep (a node suspended past its deadline fences when
//     it resumes). A deadline is an instant, not a span of a process: the
//     deadline a daemon published before it died stays valid, and passes,
//     without it.
//   - A watchdog looks again at its deadline, and at least every Margin/2
//     (Watch caps its period: a permit may be replaced by one with an
//     earlier deadline, and a look may come late), so it starts its fence
//     no later than Margin/2 after the deadline plus its own scheduling
//     delay: 1.5 Margin before the earliest takeover is left for the fence
//     and the clocks' drift (the guard, checking at the deadline itself,
//     has 2).
//   - A volume whose primary here has acknowledged no taker cannot be
//     taken over (replica.Takeover refuses every other replica): its
//     deadline is Forever, as the guard never fences it either. A taker is
//     acknowledged only by this node's daemon, only while it holds its
//     lease, and only once it has published the lease's end as the
//     volume's deadline (the guard bounds it before the compare-and-swap
//     is sent): a daemon that dies right after leaves that bound behind,
//     and the new taker may take over only once the lease is lost, 2
//     Margin after that bound.
//   - A watchdog arms only once it has read a permit of this boot in a
//     version it understands; until then it fences nothing. No permit of
//     this boot means the node's daemon has not published one since the
//     node booted: an older daemon that publishes none (a volume manager
//     upgraded before its daemon must not fence its primary at once), or
//     a new one that has not renewed yet. Neither leaves a primary
//     unwatched: a daemon that publishes permits lets no read/write
//     publish through (the only way a pod comes to write a replicated
//     volume) before it has published one itself, and never removes it,
//     so every pod writing on such a node was published after the permit
//     was there, and the watchdog of its volume, looking at least every
//     Poll, has armed by the time the pod mounts plus Poll. A permit of a
//     version it does not understand (a newer daemon's) disarms it: an
//     older volume manager next to a newer daemon does not fence, as
//     before watchdogs existed (the newer daemon's guard still does).
//   - Armed, a watchdog fences when the permit is gone or unreadable: the
//     daemon never removes it and a reboot ends the watchdog's process
//     too, so only an operator (or a broken disk) makes it go, and
//     nothing then tells that the node holds its lease. A permit left by
//     a daemon that was removed or downgraded to one that publishes none
//     runs out: its watchdogs fence their primaries once it has. A fence
//     stops writes and keeps the data (the writers killed, the pods' mounts
//     covered; what they wrote stays on the copy, no takeover follows while
//     the daemon renews the lease); the pods stay on the placeholder until
//     the permit file is removed, the replica pods restarted (their new
//     watchdogs do not arm) and the pods restarted by hand.
//
// A replica known to be no active primary (its volume manager's last view
// shows another primary, or none) has no pod writing it and is not fenced.

// Forever is the deadline of a volume no other node may take over (its
// primary here acknowledged no taker): it may write without a bound.
const Forever = time.Duration(1<<63 - 1)

// Permit is what a node's guard publishes for the volume managers on its
// node: until when each primary here may write, as instants of one clock
// of that node.
type Permit struct {
	// Until is the deadline of every volume not in Volumes: the end of the
	// node's lease (passed when the node does not hold it).
	Until time.Duration
	// Volumes are the deadlines of the volumes whose primary here the
	// guard judges on its own: Decide's Until for one with takers (the
	// instant of the verdict when it must fence), Forever for one without.
	Volumes map[volume.ID]time.Duration
	// Margin is the lease's margin, which bounds a watchdog's period.
	Margin time.Duration
}

// Deadline is until when volume id's primary here may write.
func (p Permit) Deadline(id volume.ID) time.Duration {
	if d, ok := p.Volumes[id]; ok {
		return d
	}
	return p.Until
}

// Grant is the permit of a node standing as st: every volume's deadline
// is the guard's own verdict. terms are the volumes with acknowledged
// takers (their deadline is Decide's), free those whose primary here has
// acknowledged none and whose acknowledgement is not under way (Forever);
// any other volume has the node's lease.
func (c Config) Grant(st Standing, terms []Term, free []volume.ID) Permit {
	p := Permit{Until: st.LeaseUntil, Margin: c.Margin, Volumes: map[volume.ID]time.Duration{}}
	for _, id := range free {
		p.Volumes[id] = Forever
	}
	for _, t := range terms {
		v := Decide(st, t.Takers)
		if v.MayWrite {
			p.Volumes[t.Volume] = v.Until
		} else {
			p.Volumes[t.Volume] = st.Now // passed: the guard fences it now
		}
	}
	return p
}

// WatchInput is what a volume manager's watchdog knows when it looks.
type WatchInput struct {
	// Published: a permit of this node's current boot, in a version the
	// watchdog understands, was read now (Permit).
	Published bool
	// Newer: the permit found is of a version the watchdog does not
	// understand (a newer daemon's).
	Newer bool
	// Armed: an earlier look of this watchdog read a permit (Published),
	// and none since was Newer (WatchVerdict.Armed of the last look).
	Armed  bool
	Permit Permit
	Volume volume.ID
	// Now is the instant of the look, on the permit's clock.
	Now time.Duration
	// Poll is the watchdog's period as configured.
	Poll time.Duration
	// Secondary: the volume manager's last view of the shared state shows
	// its replica as no active primary (not merely unread yet).
	Secondary bool
	// Fencing: this watchdog fenced the volume and the spell has not
	// ended (WatchVerdict.Fence of the last look).
	Fencing bool
}

// WatchVerdict says whether a volume manager must fence its primary now,
// and when to look again at the latest.
type WatchVerdict struct {
	Fence bool
	// Armed is the watchdog's state after this look (WatchInput.Armed of
	// the next).
	Armed  bool
	Next   time.Duration
	Reason string
}

// Watch is the watchdog's rule (see the argument above): once armed (a
// permit of this boot read), fence once the volume's deadline has passed
// (Now at or after it, as the guard's own Decide), or when the permit is
// gone or unreadable; never before a permit was read, nor on a newer
// daemon's permit, nor a replica known to be no primary (unless it fenced
// it as the primary: a spell ends only on a permit that lets the primary
// write, the daemon finishing the fence). It looks again
// at least every Margin/2 of the permit read.
func Watch(in WatchInput) WatchVerdict {
	next := in.Poll
	if in.Published && in.Permit.Margin > 0 {
		next = min(next, in.Permit.Margin/2)
	}
	next = max(next, time.Millisecond)
	armed := (in.Armed || in.Published) && !in.Newer
	v := WatchVerdict{Armed: armed, Next: next}
	switch {
	case in.Secondary && !in.Fencing:
		// (Fenced as the primary, then taken over: the spell goes on by
		// the permit as for a primary, stopping any new holder, since on
		// zfs-fuse a read-only dataset still takes appends, until the
		// node's daemon is back and finishes the fence.)
		v.Reason = "the replica here is not the active primary"
		return v
	case in.Newer:
		v.Reason = "the node's write permit is of a version this volume manager does not understand (a newer daemon's): not watched here"
		return v
	case !armed:
		v.Reason = "the node's daemon has published no write permit since the node booted (an older daemon publishes none, a newer one before its first renewal lets no pod write): not watched yet"
		return v
	case !in.Published:
		v.Fence = true
		v.Reason = "the node's write permit this watchdog watched is gone or unreadable: nothing tells that the node holds its lease"
		return v
	}
	d := in.Permit.Deadline(in.Volume)
	if in.Now < d {
		if d == Forever {
			v.Reason = "no other node may take the volume over"
			return v
		}
		v.Next = min(next, d-in.Now)
		v.Reason = fmt.Sprintf("the node's guard lets the primary write for %s more", d-in.Now)
		return v
	}
	v.Fence = true
	v.Reason = fmt.Sprintf("the node's guard let the primary write until %s ago, and has not renewed that (its lease ran out, or the daemon is down)", in.Now-d)
	return v
}
