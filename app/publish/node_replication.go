package publish

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Replication is what the node plugin needs to hand a replicated
// volume over (seed 000): the shared state, this node's volume managers
// and the volumes' workloads.
type Replication struct {
	Cluster  ports.ClusterState
	Control  ports.ReplicaControl
	Workload ports.ReplicaWorkload
	Events   ports.EventRecorder
	// Takers acknowledges, once the replica here is the primary and before
	// the pod mounts it, the copies that may take the volume over after a
	// loss of this node (failover.Takers); nil without node-loss failover.
	Takers TakerAcknowledger
	// WriteLock lifts the lock a volume manager's watchdog left on a copy
	// (ports.MetaWritesLocked) when a read/write publish, or a takeover's
	// PrepareWriter, makes it the writer again; nil without watchdogs.
	WriteLock ports.WriteLock
	// Sizes records an expansion of a replicated volume where every copy
	// reads it (each grows to it); nil: the expansion stays this copy's.
	Sizes ports.CapacityRecorder
	// Wait is how long a read/write publish waits for the replica to
	// become the primary (another node's pod may still hold the volume: a
	// rolling update overlaps two pods) before answering Aborted so that
	// the kubelet retries; and how long an unpublish waits for the final
	// snapshot. DefaultHandoverWait when 0.
	Wait time.Duration
}

// TakerAcknowledger claims volume id for a pod here, its active primary
// being this node's: the copies that may take it over acknowledged
// (replica.Acknowledge, recorded first where this node's fence reads
// them) and the term resumed (replica.Resume), in one compare-and-swap.
type TakerAcknowledger interface {
	Claim(ctx context.Context, id volume.ID) error
}

// DefaultHandoverWait is Replication.Wait's default.
const DefaultHandoverWait = 30 * time.Second

// WithReplication makes Publish and Unpublish hand replicated volumes
// over: a read/write publish makes this node's replica the single active
// primary first, an unpublish ends its term with a final snapshot.
func WithReplication(r Replication) Option {
	if r.Wait <= 0 {
		r.Wait = DefaultHandoverWait
	}
	return func(n *Service) { n.repl = &r }
}

// replicated reads the volume's shared state; false when the volume is
// not replicated (no state) or replication is not enabled.
func (n *Service) replicated(ctx context.Context, id volume.ID) (bool, error) {
	if n.repl == nil {
		return false, nil
	}
	_, err := n.repl.Cluster.Get(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ports.ErrNotFound):
		return false, nil
	}
	return false, err
}

// noLocalCopy answers a publish of a replicated volume on a node that holds
// no copy of it: the placement keeps pods off such nodes, and none is made
// on the fly.
func (n *Service) noLocalCopy(ctx context.Context, id volume.ID) error {
	st, err := n.repl.Cluster.Get(ctx, id)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("node %s holds no replica of volume %s; it may be used on %v", n.cfg.Node, id, placement.UsableOn(st))
	n.repl.Events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "NoReplicaHere", Message: msg})
	return fmt.Errorf("%s: %w", msg, refusal.ErrPrecondition)
}

// acquire makes this node's replica of id the active primary (seed 000):
// its pod leaves the volume's workload first and the workload is sized
// for the rest, in that order, so that the ReplicaSet never deletes it;
// then its volume manager catches up and promotes itself by
// compare-and-swap. When it does not within Wait (another node is still
// active), the pod rejoins and the answer wraps ports.ErrNotPrimary. A
// primary's filesystem is then remounted unless this term already did
// (remountIfNeeded).
func (n *Service) acquire(ctx context.Context, id volume.ID, log *zap.Logger) error {
	start := time.Now()
	// Each step's duration, logged with the outcome: where a publish's
	// time goes (the pod leaving its workload, the promotion, the
	// compare-and-swap, the remount).
	var steps []zap.Field
	last := start
	step := func(name string) {
		now := time.Now()
		steps = append(steps, zap.Duration(name, now.Sub(last)))
		last = now
	}
	if err := n.repl.Workload.SetOutside(ctx, id, n.cfg.Node, true); err != nil {
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("the volume manager of volume %s on %s is not running yet: %w", id, n.cfg.Node, ports.ErrNotPrimary)
		}
		return err
	}
	if err := n.resize(ctx, id); err != nil {
		log.Warn("workload not resized for the publish", zap.Error(err))
	}
	step("outside")
	if err := n.repl.Control.Acquire(ctx, id, n.repl.Wait); err != nil {
		if rerr := n.rejoin(ctx, id); rerr != nil {
			log.Warn("the replica pod did not rejoin the workload after a failed publish", zap.Error(rerr))
		}
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("%v: %w", err, ports.ErrNotPrimary)
		}
		n.repl.Events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "PublishWaiting", Message: err.Error()})
		return err
	}
	step("promoted")
	// One compare-and-swap before the pod writes: the copies that may
	// take over acknowledged (until then none may: the volume would wait
	// for this node after its loss), and this term resumed (a takeover
	// decided on a lease verdict from before is refused). Without it the
	// pod does not mount: the kubelet retries; taken over meanwhile, the
	// pod rejoins and the publish answers as a node that is not primary.
	if n.repl.Takers != nil {
		if err := n.repl.Takers.Claim(ctx, id); errors.Is(err, replica.ErrFenced) {
			if rerr := n.rejoin(ctx, id); rerr != nil {
				log.Warn("the replica pod did not rejoin the workload after a publish a takeover overtook", zap.Error(rerr))
			}
			return fmt.Errorf("%v: %w", err, ports.ErrNotPrimary)
		} else if err != nil {
			return fmt.Errorf("the replica here is the primary, but the publish could not be recorded: %v: %w", err, refusal.ErrPending)
		}
	}
	step("claimed")
	if err := n.remountIfNeeded(ctx, id, log); err != nil {
		if errors.Is(err, ports.ErrNotPrimary) {
			if rerr := n.rejoin(ctx, id); rerr != nil {
				log.Warn("the replica pod did not rejoin the workload after a publish a takeover overtook", zap.Error(rerr))
			}
		}
		return err
	}
	step("remount")
	log.Info("the replica here is the active primary", append([]zap.Field{zap.Duration("took", time.Since(start))}, steps...)...)
	return nil
}

// release ends this node's replica's term, if it is the active primary:
// a final snapshot recorded with the demotion, before the unpublish
// answers; then its pod rejoins the workload.
func (n *Service) release(ctx context.Context, id volume.ID, log *zap.Logger) error {
	err := n.repl.Control.Release(ctx, id, n.repl.Wait)
	if errors.Is(err, ports.ErrNotFound) {
		// No volume manager here: fine unless the state says this node
		// is the active primary (its final snapshot must be recorded).
		st, gerr := n.repl.Cluster.Get(ctx, id)
		if gerr != nil {
			if errors.Is(gerr, ports.ErrNotFound) {
				return nil
			}
			return gerr
		}
		if r, ok := st.Replica(n.cfg.Node); ok && r.Active && st.Primary == n.cfg.Node {
			return fmt.Errorf("%v, and it is the active primary: its final snapshot cannot be taken yet: %w", err, ports.ErrUnavailable)
		}
	} else if err != nil {
		return err
	}
	// The pod goes back in before the unpublish answers: a failure is the
	// kubelet's to retry (the release is then a no-op), or the pod would
	// stay outside the workload, under the primary's budget, for good.
	if err := n.rejoin(ctx, id); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("released, but the replica pod did not rejoin the workload: %w", err)
	}
	log.Info("released: the final snapshot is recorded")
	return nil
}

// rejoin moves this node's pod back into the workload if it is outside
// and its replica is not the active primary: the workload is raised first,
// then the pod joins (a ReplicaSet deletes a surplus pod at once; raised
// first, the surplus it may create meanwhile is a new pod, not ready,
// deleted first). A pod that never left is not counted twice.
func (n *Service) rejoin(ctx context.Context, id volume.ID) error {
	st, err := n.repl.Cluster.Get(ctx, id)
	if err != nil {
		return err
	}
	if r, ok := st.Replica(n.cfg.Node); ok && r.Active && st.Primary == n.cfg.Node {
		return nil
	}
	ws, err := n.repl.Workload.Status(ctx, id, n.cfg.Node)
	if err != nil {
		return err
	}
	if !ws.OutsideOnNode {
		return nil
	}
	if err := n.repl.Workload.Apply(ctx, id, placement.DesiredAround(st, max(ws.Outside-1, 0)), 0); err != nil {
		return err
	}
	return n.repl.Workload.SetOutside(ctx, id, n.cfg.Node, false)
}

// resize sizes the volume's workload for the pods outside it.
func (n *Service) resize(ctx context.Context, id volume.ID) error {
	st, err := n.repl.Cluster.Get(ctx, id)
	if err != nil {
		return err
	}
	ws, err := n.repl.Workload.Status(ctx, id, n.cfg.Node)
	if err != nil {
		return err
	}
	return n.repl.Workload.Apply(ctx, id, placement.DesiredAround(st, ws.Outside), 0)
}

// remountIfNeeded remounts the volume's filesystem before a read/write
// mount unless it is known to have been remounted in the current primary
// term here (volume.NeedsRemount): what the replica received while a
// secondary must be what the pod reads, and a remount drops the file
// pages a FUSE-based ZFS kept cached from before. The term is read from
// the newest committed state, after the replica became the primary; the
// record from the volume, where each remount leaves it (it outlives this
// process). A remount refused because another pod's mount here uses the
// filesystem (a read-only pod that mounted the copy while it was a
// secondary) is never skipped: the publish answers ErrPending, so the
// kubelet retries, with an event saying what it waits for.
func (n *Service) remountIfNeeded(ctx context.Context, id volume.ID, log *zap.Logger) error {
	return n.remount(ctx, id, log, true)
}

// PrepareWriter remounts, right after a takeover made this node the
// volume's active primary, the filesystem that the publish to follow
// would remount (remountIfNeeded, recorded for the term): the remount then
// overlaps the pod's rescheduling instead of delaying its start. A publish
// arriving meanwhile waits for it (waitPrepared) and finds the remount
// recorded. When another call holds the volume (a publish, an unpublish),
// nothing is done: a publish remounts itself when needed. A refused
// remount raises no event here: the publish raises it, and retries.
func (n *Service) PrepareWriter(ctx context.Context, id volume.ID) error {
	if n.repl == nil {
		return nil
	}
	done := make(chan struct{})
	if _, busy := n.preparing.LoadOrStore(id, done); busy {
		return nil
	}
	defer func() {
		n.preparing.Delete(id)
		close(done)
	}()
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return nil
	}
	defer unlock()
	if _, err := n.store.GetVolume(ctx, id); err != nil {
		return err
	}
	err := n.remount(ctx, id, n.log.With(zap.String("volume", string(id)), zap.String("for", "takeover")), false)
	if errors.Is(err, ports.ErrNotPrimary) {
		return nil // not (or no longer) the primary here: no writer to prepare for
	}
	return err
}

// waitPrepared waits for a PrepareWriter of id under way, if any.
func (n *Service) waitPrepared(ctx context.Context, id volume.ID) error {
	v, ok := n.preparing.Load(id)
	if !ok {
		return nil
	}
	select {
	case <-v.(chan struct{}):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("volume %s is being prepared for its new primary: %w", id, refusal.ErrPending)
	}
}

func (n *Service) remount(ctx context.Context, id volume.ID, log *zap.Logger, raise bool) error {
	st, err := n.repl.Cluster.Get(ctx, id)
	if err != nil {
		return err
	}
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	term := volume.Term{Remounted: info.Metadata[ports.MetaRemountedEpoch]}
	if r, ok := st.Replica(n.cfg.Node); ok && r.Active && st.Primary == n.cfg.Node {
		term.Active, term.Epoch = true, uint64(st.Epoch)
	} else {
		// The replica became the primary, and the newest state says it no
		// longer is (a takeover overtook the publish): never read/write.
		return fmt.Errorf("the replica of volume %s on %s is no longer the active primary (epoch %d, primary %q): %w", id, n.cfg.Node, st.Epoch, st.Primary, ports.ErrNotPrimary)
	}
	if st := info.Encryption; !raise && st.Known && st.Encrypted() && st.OwnRoot && !st.KeyLoaded {
		// A takeover's preparation has no key: the publish to follow
		// loads it from its Secret, then remounts.
		log.Info("not remounted: the encryption key is not loaded here; the publish loads it")
		return nil
	}
	if why := info.Metadata[ports.MetaWritesLocked]; why != "" && n.repl.WriteLock != nil {
		// The active primary here, with its claim granted: it writes.
		if err := n.repl.WriteLock.UnlockWrites(ctx, id); err != nil {
			return fmt.Errorf("the replica of volume %s on %s is the primary, but the write lock its watchdog left (%s) was not lifted: %v: %w", id, n.cfg.Node, why, err, refusal.ErrPending)
		}
		log.Info("write lock lifted: the replica here is the active primary", zap.String("locked because", why))
	}
	verdict := volume.NeedsRemount(term)
	if !verdict.Needed() {
		log.Info("not remounted", zap.Stringer("why", verdict))
		return nil
	}
	if err := n.store.Remount(ctx, id); err != nil {
		msg := fmt.Sprintf("the replica of volume %s on %s is the primary, but its filesystem must be remounted before a read/write mount (%s), or the pod may read pages cached before what the copy received", id, n.cfg.Node, verdict)
		reason := "RemountFailed"
		if errors.Is(err, ports.ErrBusy) {
			reason = "RemountRefused"
			msg += fmt.Sprintf(", which is refused while other pods on %s have it mounted (%s; typically a read-only pod that mounted the copy while it was a secondary): they must unmount it first; the publish is retried until then", n.cfg.Node, n.otherTargets(info))
		} else {
			msg += "; the publish is retried"
		}
		if raise {
			n.repl.Events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: reason, Message: msg})
		}
		return fmt.Errorf("%s: %v: %w", msg, err, refusal.ErrPending)
	}
	if rec, ok := verdict.Record(); ok {
		// Without the record, a later publish of this term remounts again
		// (refused while this pod uses it): never a stale page.
		if err := n.store.SetMetadata(ctx, id, map[string]string{ports.MetaRemountedEpoch: rec}); err != nil {
			log.Warn("remounted, but the remount is not recorded: another pod's publish in this term will wait for this one to unmount", zap.Error(err))
		}
	}
	log.Info("remounted", zap.Stringer("why", verdict))
	return nil
}

// otherTargets lists, for an event, where the volume's filesystem is
// mounted on this node besides its own mountpoint (the pods' targets);
// "unknown" when the mount table cannot be read.
func (n *Service) otherTargets(info ports.VolumeInfo) string {
	points, err := n.mount.MountsOf(info.MountSource)
	if err != nil {
		return "unknown: " + err.Error()
	}
	var others []string
	for _, p := range points {
		if p != path.Clean(info.MountPath) {
			others = append(others, p)
		}
	}
	return strings.Join(others, ", ")
}
