package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// WatchdogConfig configures a volume manager's watchdog.
type WatchdogConfig struct {
	Node   replica.Node
	Volume volume.ID
	// Poll is how often it reads the node's permit (at least every half
	// lease margin, whatever it says: liveness.Watch).
	Poll time.Duration
	// Observed says whether the volume manager has read the volume's
	// state since it started (Replicator.Observed; nil: always): until
	// then its replica, whatever it is, is fenced as a primary would be,
	// and the fence says so.
	Observed func() bool
}

// DefaultWatchdogPoll is WatchdogConfig.Poll's default.
const DefaultWatchdogPoll = 200 * time.Millisecond

// Watchdog fences a primary from its own volume manager when the node's
// daemon, whose guard normally does it, is down: it reads the node's write
// permit (the guard's verdicts, ports.PermitReader) and, armed by the
// first one it reads (an older daemon publishes none: then it watches
// nothing), once its volume's deadline has passed or the permit has gone
// (liveness.Watch), makes the volume's filesystem refuse writes on every
// mount of it (ports.WriteLock: no mount is touched, so it reaches the
// pods' mounts whatever mount namespace it runs in) and stops (SIGSTOP)
// every process holding it (ports.HolderStopper). While the deadline stays
// passed it stops new holders at every look (on zfs-fuse a file can still
// be opened for appending on a read-only dataset). Once the permit lets
// the primary write again the spell ends; the filesystem stays read-only
// and the holders stopped until the node's guard finishes the fence
// (kills them), lifts the lock and gives the pods back, which its record
// (ports.FenceRecords) tells it to.
type Watchdog struct {
	cfg       WatchdogConfig
	permit    ports.PermitReader
	records   ports.FenceRecords
	secondary func() bool
	store     Store
	mounts    ports.MountTable
	lock      ports.WriteLock
	stopper   ports.HolderStopper
	events    ports.EventRecorder
	log       *zap.Logger

	info     *ports.VolumeInfo      // the volume's mount, read once
	armed    bool                   // a permit this watchdog understands was read (liveness.WatchVerdict.Armed)
	fencing  atomic.Bool            // the deadline has passed and the volume was fenced
	unread   string                 // the last failure to read the permit logged
	recorded string                 // this fencing spell's record, still to write ("" when written)
	held     []ports.StoppedProcess // stopped by a fence not yet told (its lock failed)
}

// NewWatchdog returns the watchdog of cfg.Volume's replica on cfg.Node;
// secondary says whether the replica is known to be no active primary
// (Replicator.Secondary).
func NewWatchdog(cfg WatchdogConfig, permit ports.PermitReader, records ports.FenceRecords, secondary func() bool, store Store, mounts ports.MountTable, lock ports.WriteLock, stopper ports.HolderStopper, events ports.EventRecorder, log *zap.Logger) *Watchdog {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultWatchdogPoll
	}
	return &Watchdog{cfg: cfg, permit: permit, records: records, secondary: secondary, store: store, mounts: mounts, lock: lock, stopper: stopper, events: events,
		log: log.With(zap.String("volume", string(cfg.Volume)))}
}

// Run watches until ctx ends.
func (w *Watchdog) Run(ctx context.Context) {
	w.log.Info("watchdog started: the primary here is fenced when the node's write permit runs out", zap.Duration("poll", w.cfg.Poll))
	for {
		t := time.NewTimer(w.Check(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Check reads the permit once, fences when liveness.Watch says so, and
// returns when to look again.
func (w *Watchdog) Check(ctx context.Context) time.Duration {
	p, now, err := w.permit.Read()
	if err != nil {
		if msg := err.Error(); msg != w.unread {
			w.unread = msg
			w.log.Warn("the node's write permit is not readable", zap.Bool("armed", w.armed), zap.Error(err))
		}
	} else {
		w.unread = ""
	}
	v := liveness.Watch(liveness.WatchInput{Published: err == nil, Newer: errors.Is(err, ports.ErrPermitVersion), Armed: w.armed, Permit: p,
		Volume: w.cfg.Volume, Now: now, Poll: w.cfg.Poll, Secondary: w.secondary(), Fencing: w.fencing.Load()})
	if v.Armed != w.armed {
		w.armed = v.Armed
		if v.Armed {
			w.log.Info("watchdog armed: the node's daemon publishes a write permit", zap.String("reason", v.Reason))
		} else {
			w.log.Warn("watchdog disarmed", zap.String("reason", v.Reason))
		}
	}
	if !v.Fence {
		if w.info == nil && v.Armed && !w.secondary() {
			// The volume's mount read while nothing is wrong: a fence
			// after a stall (the node paused, its zfs daemon busy on
			// waking) stops the holders before any zfs command.
			if info, err := w.store.GetVolume(ctx, w.cfg.Volume); err == nil {
				w.info = &info
			}
		}
		if w.fencing.Load() {
			w.fencing.Store(false)
			w.log.Info("the primary may write again; the node's daemon gives its pods back", zap.String("reason", v.Reason))
		}
		return v.Next
	}
	if err := w.fence(ctx, v.Reason, now); err != nil {
		w.log.Error("fence failed; trying again", zap.Error(err))
		return min(v.Next, 100*time.Millisecond)
	}
	return v.Next
}

// what names the fenced replica: the primary, or a copy whose role its
// volume manager has not read yet (just started while the daemon is
// away: fenced all the same, since it may be the primary).
func (w *Watchdog) what() string {
	if w.cfg.Observed != nil && !w.cfg.Observed() {
		return fmt.Sprintf("the copy on %s, whose role its volume manager has not read yet (it may be the primary),", w.cfg.Node)
	}
	return "primary on " + string(w.cfg.Node)
}

// Fencing reports whether the watchdog has fenced its volume and the
// deadline is still passed.
func (w *Watchdog) Fencing() bool { return w.fencing.Load() }

// fence locks the volume's writes and stops its holders at the start of
// a fencing spell, and stops the holders again at every look during it.
func (w *Watchdog) fence(ctx context.Context, reason string, now time.Duration) error {
	if w.info == nil {
		info, err := w.store.GetVolume(ctx, w.cfg.Volume)
		if errors.Is(err, ports.ErrNotFound) {
			return nil // no copy here: nothing writes it
		}
		if err != nil {
			return fmt.Errorf("fence %s: %w", w.cfg.Volume, err)
		}
		w.info = &info
	}
	// Where this process sees the filesystem: every mount of it shares
	// its device, which is how its holders are found, in any namespace.
	points, err := w.mounts.MountsOf(w.info.MountSource)
	if err != nil {
		return fmt.Errorf("fence %s: %w", w.cfg.Volume, err)
	}
	if !slices.Contains(points, w.info.MountPath) {
		points = append([]string{w.info.MountPath}, points...)
	}
	fencing := w.fencing.Load()
	if !fencing && w.recorded == "" {
		// The record first: whatever happens next (a lock that fails,
		// this process killed), the daemon finds it and finishes the
		// fence (the stopped holders killed, the lock lifted, the pods
		// restarted); a record of a fence that stopped nothing costs a
		// give-back that finds nothing to do. One record per spell, the
		// same text however often it is written, and never the same
		// text twice (the spell's instant): the daemon gives back each
		// record once (a second text read after its give-back restarted
		// the new pods again).
		w.recorded = fmt.Sprintf("%s fenced by its volume manager (the node's daemon did not renew its write permit): %s [spell at %s of the node's boot time]", w.what(), reason, now)
		if err := w.records.Record(w.cfg.Volume, w.recorded); err != nil {
			w.log.Warn("the fence is not recorded for the daemon yet; fencing all the same", zap.Error(err))
		} else {
			w.recorded = ""
		}
	}
	// First the holders, stopped (a scan of /proc, some signals): the
	// lock takes zfs commands, which a loaded node may run slowly, and
	// the deadline leaves 1.5 margins before a survivor may take over.
	stopped, err := w.stopper.StopHolders(ctx, points)
	w.held = append(w.held, stopped...) // stopped before a failed lock are told with the fence
	if err != nil {
		return fmt.Errorf("fence %s: %w", w.cfg.Volume, err)
	}
	stopped = w.held
	w.held = nil
	if !fencing {
		// Then the lock, against a process that opens the volume later
		// (on OpenZFS every write fails then; on zfs-fuse the next
		// looks stop it).
		err := w.lock.LockWrites(ctx, w.cfg.Volume, "fenced by its volume manager's watchdog: "+reason)
		if errors.Is(err, ports.ErrNotFound) {
			return nil
		}
		if err != nil {
			w.held = stopped
			return fmt.Errorf("fence %s: %w", w.cfg.Volume, err)
		}
	}
	if !fencing {
		w.log.Warn("the node's write permit ran out: primary fenced by its volume manager (read-only, holders stopped)", zap.String("reason", reason), zap.Any("stopped", stopped), zap.Strings("mounts", points))
		w.fencing.Store(true)
		msg := fmt.Sprintf("%s fenced by its volume manager (the node's daemon did not renew its write permit): %s; its filesystem is read-only and %d process(es) holding it were stopped (SIGSTOP) %v; the daemon kills them, makes it writable again and restarts the pods once the primary may write again",
			w.what(), reason, len(stopped), stopped)
		w.events.Record(ctx, w.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "Fenced", Message: msg})
	} else if len(stopped) > 0 {
		w.log.Warn("processes holding the fenced volume stopped again", zap.Any("stopped", stopped))
	}
	if w.recorded == "" {
		return nil
	}
	// The record tells the daemon to lift the lock and give the pods
	// back, stopped or not; written until it succeeds.
	if err := w.records.Record(w.cfg.Volume, w.recorded); err != nil {
		return fmt.Errorf("fence %s: record it for the daemon: %w", w.cfg.Volume, err)
	}
	w.recorded = ""
	return nil
}
