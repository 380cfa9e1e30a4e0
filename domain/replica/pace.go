package replica

// Pace decides when a volume manager reads the shared state and its pool
// and steps the machine to rest (a settle): at once on a request, else
// when nothing holds it back (a back-off after failed actions) and
// something may have changed: a change was told, the last settle stopped
// short, the machine's Wake is due, the view is stale, the resync is due,
// or a watch stayed silent too long. An idle replica that watches reads
// nothing. The volume manager feeds it what woke it (Tick, Changed,
// Requested) and what a settle found (Settled); it carries out the reads.
// Pace is a plain value: not safe for concurrent use.
type Pace struct {
	resyncTicks int
	watching    bool
	// skip: ticks left before a settle after failures; failed: the
	// failures in a row that earned it.
	skip, failed int
	urgent       bool
	changed      bool
	incomplete   bool
	// sinceFull counts the ticks since the last full read (state and
	// pool), whatever happened in between.
	sinceFull int
	// quiet counts the ticks since the last settle: a watch silent for
	// three snapshot intervals while the primary reports one each may be
	// the watch of an API server that stopped answering (a watch does not
	// say so).
	quiet int
}

// MaxBackoffTicks bounds the wait after failed settles: 1, 3, 7, ... up
// to this many ticks, so that a peer that is down or a pool that is full
// does not cost the API server a write or two per tick and volume.
const MaxBackoffTicks = 64

// NewPace returns the pace of a volume manager that reads everything at
// least every resyncTicks ticks (at least 1). Its first settle is due at
// once and full. Watching says whether changes are told (else it settles
// every tick).
func NewPace(resyncTicks int, watching bool) Pace {
	resyncTicks = max(1, resyncTicks)
	return Pace{resyncTicks: resyncTicks, watching: watching, changed: true, sinceFull: resyncTicks}
}

// Watching records whether changes are told from now on (a watch that
// ended: every tick settles).
func (p *Pace) Watching(on bool) { p.watching = on }

// Tick records a tick: it counts towards the resync, the watch-silence
// bound and the end of a back-off.
func (p *Pace) Tick() {
	p.sinceFull++
	p.quiet++
	if p.skip > 0 {
		p.skip--
	}
}

// Changed records a change told by the watch.
func (p *Pace) Changed() { p.changed = true }

// Requested records a request (a snapshot now, an acquisition, a
// release): the next settle comes at once, back-off or not. A change does
// not end a back-off: the replica's own writes are changes too.
func (p *Pace) Requested() { p.urgent = true }

// BackingOff reports whether a back-off holds the next settle.
func (p *Pace) BackingOff() bool { return p.skip > 0 }

// ViewReturned ends a back-off: the shared state reads again after an
// outage, and what the replica fetched or snapshotted meanwhile must be
// reported now, before a takeover decided after the outage (5.8), not
// after the back-off its failures during the outage earned.
func (p *Pace) ViewReturned() { p.skip, p.failed = 0, 0 }

// Next reports whether a settle is due now, given the machine's Wake
// (Machine.Wake), whether its view is stale, and the volume's snapshot
// interval in ticks (Machine.SnapshotEvery); and whether it must list the
// pool afresh (full). A due settle is taken: the caller settles and
// reports with Settled.
func (p *Pace) Next(wake int, stale bool, snapshotEvery int) (settle, full bool) {
	urgent := p.urgent
	p.urgent = false
	if !urgent && (p.skip > 0 || p.watching && !p.changed && !p.incomplete && p.sinceFull < p.resyncTicks &&
		wake != 0 && !stale && p.quiet < 3*max(1, snapshotEvery)) {
		return false, false
	}
	full = p.sinceFull >= p.resyncTicks
	p.changed, p.quiet = false, 0
	if full {
		p.sinceFull = 0
	}
	return true, full
}

// Settled records what a settle found: whether an action failed (a
// back-off follows: 1, 3, 7, ... ticks) and whether it stopped before the
// machine was at rest (the next tick settles again).
func (p *Pace) Settled(failed, incomplete bool) {
	p.incomplete = incomplete
	if failed {
		p.failed++
		p.skip = min(1<<min(p.failed, 16), MaxBackoffTicks) - 1
		return
	}
	p.failed, p.skip = 0, 0
}
