package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// exec carries out one action of the machine.
func (r *Replicator) exec(ctx context.Context, a replica.Action) error {
	switch a := a.(type) {
	case replica.ReportSnapshot:
		taken := r.takenOf(a.Snap.GUID)
		err := r.update(ctx, func(s *replica.State) error {
			replica.Join(s, r.cfg.Node)
			if err := replica.Report(s, r.cfg.Node, a.Snap, a.Ready); err != nil {
				return err
			}
			replica.Stamp(s, r.cfg.Node, a.Snap, taken)
			return nil
		})
		if err == nil {
			r.log.Info("replica reported", zap.Uint64("snapshot", uint64(a.Snap.Number)), zap.Uint64("epoch", uint64(a.Snap.Epoch)), zap.Bool("ready", a.Ready))
		}
		return err
	case replica.ReadPeer:
		list, err := r.transport.Snapshots(r.peerCtx(ctx), a.Peer, r.cfg.Volume)
		if err != nil {
			return err
		}
		sizes := make(map[uint64]int64, len(list))
		for _, s := range list {
			sizes[s.GUID] = s.SizeBytes
		}
		r.mu.Lock()
		r.peerSizes = sizes
		r.mu.Unlock()
		return r.m.Step(replica.PeerRead{Peer: a.Peer, Snaps: toSnaps(list)})
	case replica.Fetch:
		return r.fetch(ctx, a)
	case replica.Replace:
		return r.replace(ctx, a)
	case replica.Rollback:
		to := replica.SnapshotName(a.To)
		// The copy kept aside snapshots the volume under KeepAs for a
		// moment: not a snapshot that blocks the discard.
		if err := r.guardDiscard(ctx, to, a.KeepAs); err != nil {
			return err
		}
		if a.KeepAs != "" {
			// A fenced term's writes are kept before anything is
			// discarded; without the copy, nothing is.
			if err := r.keepAside(ctx, a.KeepAs, discarded(a.Discard), "rolling back to "+to+": "+a.Reason); err != nil {
				return err
			}
		}
		// What remains is recorded first: nobody may count the copy about
		// to go.
		taken := r.takenOf(a.To.GUID)
		if err := r.update(ctx, func(s *replica.State) error {
			if err := replica.Report(s, r.cfg.Node, a.To, false); err != nil {
				return err
			}
			replica.Stamp(s, r.cfg.Node, a.To, taken)
			return nil
		}); err != nil {
			return fmt.Errorf("recording the rollback to %s: %w", to, err)
		}
		r.log.Warn("replica diverged: rolling back", zap.String("snapshot", to),
			zap.String("discarding", fmt.Sprint(snapNames(a.Discard))), zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "RolledBack",
			Message: fmt.Sprintf("replica on %s rolled back to %s, discarding %v: %s", r.cfg.Node, to, discarded(a.Discard), a.Reason)})
		return r.store.Rollback(ctx, r.cfg.Volume, to)
	case replica.TakeSnapshot:
		if a.Periodic {
			// An interval without writes costs no snapshot, no transfer
			// and no write of the shared state, where the pool can tell.
			if unchanged, err := r.store.Unchanged(ctx, r.cfg.Volume); err == nil && unchanged {
				return replica.ErrUnchanged
			}
		}
		name := replica.SnapshotName(replica.Snap{Number: a.Number, Epoch: a.Epoch})
		info, err := r.store.CreateSnapshot(ctx, r.cfg.Volume, name, nil)
		if err != nil {
			return err
		}
		r.log.Info("snapshot taken", zap.String("snapshot", name), zap.Uint64("epoch", uint64(a.Epoch)), zap.Int64("bytes", info.SizeBytes))
		r.mu.Lock()
		r.status.Totals.SnapshotsTaken++
		if info.GUID != 0 && !info.CreatedAt.IsZero() {
			if r.takenAt == nil {
				r.takenAt = map[uint64]int64{}
			}
			r.takenAt[info.GUID] = info.CreatedAt.Unix()
		}
		r.mu.Unlock()
		return nil
	case replica.StepDown:
		err := r.update(ctx, func(s *replica.State) error { return replica.Demote(s, r.cfg.Node, a.Epoch, a.Final) })
		if err == nil {
			r.log.Info("primary stepped down", zap.String("final", replica.SnapshotName(a.Final)), zap.Uint64("epoch", uint64(a.Epoch)))
		}
		return err
	case replica.ForgetFetch:
		err := r.update(ctx, func(s *replica.State) error { return replica.ClearFetch(s, r.cfg.Node, a.Target) })
		if err == nil {
			r.log.Info("fetch target forgotten: the transfer failed and left nothing", zap.String("snapshot", replica.SnapshotName(a.Target)))
		}
		return err
	case replica.DestroySnapshots:
		var gone error
		for _, s := range a.Snaps {
			err := r.store.DestroySnapshot(ctx, r.cfg.Volume, replica.SnapshotName(s))
			switch {
			case errors.Is(err, ports.ErrNotFound):
				// Already gone (or the volume is): something else changed
				// the store. The rest is still pruned; the machine, told,
				// lists the store again rather than assume what it holds.
				gone = fmt.Errorf("destroying snapshot %s: already gone, the store is listed again: %w", replica.SnapshotName(s), err)
			case err != nil:
				return err
			}
		}
		if gone != nil {
			return gone
		}
		r.log.Info("old snapshots destroyed", zap.String("snapshots", fmt.Sprint(snapNames(a.Snaps))))
		return nil
	case replica.LeaveVolume:
		return r.leave(ctx, a)
	case replica.BecomePrimary:
		st, err := r.updateState(ctx, func(s *replica.State) error { return replica.Promote(s, r.cfg.Node) })
		if err != nil {
			return err
		}
		self, _ := st.Replica(r.cfg.Node)
		r.log.Info("became the active primary", zap.Uint64("epoch", uint64(st.Epoch)), zap.Uint64("snapshot", uint64(self.Snapshot)))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventNormal, Reason: "BecamePrimary",
			Message: fmt.Sprintf("the replica on %s is the active primary of epoch %d, from snapshot %d of epoch %d", r.cfg.Node, st.Epoch, self.Snapshot, self.SnapshotEpoch)})
		return nil
	case replica.Alert:
		if a.Event != "" {
			r.log.Warn(a.Reason, zap.String("event", a.Event))
			r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: a.Event, Message: a.Reason})
			return nil
		}
		r.log.Error("replicas conflict: nothing discarded, an operator must decide", zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "Conflict", Message: a.Reason})
		return nil
	case replica.Grow:
		// Read afresh: a copy grown meanwhile (a second expansion, by a
		// newer view) is never shrunk to an older size.
		if info, err := r.store.GetVolume(ctx, r.cfg.Volume); err != nil {
			return fmt.Errorf("growing the copy to the volume's size: %w", err)
		} else if info.CapacityBytes >= a.Bytes {
			return nil
		}
		if err := r.store.Resize(ctx, r.cfg.Volume, a.Bytes); err != nil {
			return fmt.Errorf("growing the copy to the volume's size: %w", err)
		}
		r.log.Info("the copy takes the volume's size", zap.Int64("bytes", a.Bytes))
		return nil
	case replica.Conform:
		if err := r.store.SetProperties(ctx, r.cfg.Volume, a.Properties); err != nil {
			return fmt.Errorf("setting the volume's properties on the copy: %w", err)
		}
		r.log.Info("the copy takes the volume's properties", zap.Any("properties", a.Properties))
		return nil
	}
	return fmt.Errorf("unknown action %T", a)
}

// keepAside keeps the volume as it is, before a rollback, a replacement
// or a leave discards a fenced term's writes (gone says what goes), in a
// copy an operator can inspect and drop (SnapshotStore.KeepAside), named
// in a FencedWritesKept event. When the copy cannot be made (no space in
// the pool), nothing is discarded: a FencedWritesNotKept event says why,
// and the action is retried until space is freed.
func (r *Replicator) keepAside(ctx context.Context, name, gone, what string) error {
	kept, err := r.store.KeepAside(ctx, r.cfg.Volume, name)
	var ev ports.Event
	if err != nil {
		hint := ""
		if errors.Is(err, ports.ErrNoSpace) {
			hint = "; free space in the pool (the copy needs about the volume's used space) and it is retried"
		}
		ev = ports.Event{Type: ports.EventWarning, Reason: "FencedWritesNotKept",
			Message: fmt.Sprintf("replica on %s keeps its copy as it is: keeping what it would discard (%s) aside as %s failed: %v%s (it was %s)", r.cfg.Node, gone, name, err, hint, what)}
		r.log.Error("fenced writes not kept aside: nothing is discarded", zap.String("name", name), zap.Error(err))
	} else {
		ev = ports.Event{Type: ports.EventWarning, Reason: "FencedWritesKept",
			Message: fmt.Sprintf("replica on %s keeps what it is about to discard (%s) as %s (%d bytes); inspect: %s; drop: %s (it is %s)", r.cfg.Node, gone, kept.Name, kept.SizeBytes, kept.Inspect, kept.Drop, what)}
		r.log.Warn("fenced writes kept aside", zap.String("copy", kept.Name), zap.Int64("bytes", kept.SizeBytes), zap.String("drop", kept.Drop))
	}
	r.mu.Lock()
	repeated := r.lastKept == ev.Message
	r.lastKept = ev.Message
	r.mu.Unlock()
	if !repeated { // once per situation, not on every retry
		r.events.Record(ctx, r.cfg.Volume, ev)
	}
	if err != nil {
		return fmt.Errorf("keeping the fenced writes aside as %s before discarding them: %w", name, err)
	}
	return nil
}

// update runs a domain rule on the volume's shared state by
// compare-and-swap.
func (r *Replicator) update(ctx context.Context, fn func(*replica.State) error) error {
	_, err := r.updateState(ctx, fn)
	return err
}

func snapNames(s []replica.Snap) []string {
	out := make([]string, 0, len(s))
	for _, x := range s {
		out = append(out, replica.SnapshotName(x))
	}
	return out
}

// discarded names what a rollback throws away, for its event.
func discarded(s []replica.Snap) string {
	if len(s) == 0 {
		return "changes never snapshotted"
	}
	return fmt.Sprint(snapNames(s))
}

// openFetch records the transfer's target by compare-and-swap (from then
// on no replica's retention destroys it) and opens the peer's stream.
// A resumed transfer records nothing: the target of the interrupted
// attempt is still recorded (a failure that kept partial state keeps it),
// and it is the snapshot the resume token names. Nor does a transfer
// decided on a stale view (replica.Fetch.Stale: no compare-and-swap can
// land; the primary's stale retention keeps the target).
func (r *Replicator) openFetch(ctx context.Context, peer replica.Node, req ports.SendRequest, target replica.Snap, stale bool) (io.ReadCloser, error) {
	if req.ResumeToken == "" && !stale {
		if err := r.update(ctx, func(s *replica.State) error { return replica.RecordFetch(s, r.cfg.Node, target) }); err != nil {
			return nil, fmt.Errorf("recording the fetch of %s: %w", req.To, err)
		}
	}
	return r.transport.Fetch(r.peerCtx(ctx), peer, req)
}

// fetch receives a snapshot from a peer and checks that what arrived is the
// snapshot asked for (by GUID).
func (r *Replicator) fetch(ctx context.Context, a replica.Fetch) (err error) {
	req := ports.SendRequest{Volume: r.cfg.Volume, To: replica.SnapshotName(a.Target), Accept: r.cfg.Accept}
	if a.Base != nil {
		req.From = replica.SnapshotName(*a.Base)
	}
	kind := streamIncremental
	if a.Base == nil {
		kind = streamFull
	}
	log := r.log.With(zap.String("peer", string(a.Peer)), zap.String("snapshot", req.To), zap.String("base", req.From))
	// An interrupted receive that the store kept (OpenZFS) resumes where it
	// stopped; elsewhere the transfer restarts from the last complete snapshot.
	token, err := r.store.ResumeToken(ctx, r.cfg.Volume)
	if err != nil {
		return err
	}
	req.ResumeToken = token
	if token != "" {
		kind = streamResumed
		log.Info("resuming an interrupted transfer")
	}
	log = log.With(zap.String("stream", kind), zap.Bool("staleView", a.Stale))
	stream, err := r.openFetch(ctx, a.Peer, req, a.Target, a.Stale)
	if err != nil {
		r.openFailed()
		v := replica.OnFetchFailure(replica.FetchFailure{Opening: true, Resumed: token != "",
			PeerCannotResume: errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrNotFound)})
		if v.DiscardPartial {
			log.Warn("the peer cannot resume the transfer: discarding the partial receive", zap.Error(err))
			if derr := r.store.DiscardPartial(ctx, r.cfg.Volume); derr != nil {
				return errors.Join(err, derr)
			}
		}
		return err
	}
	defer stream.Close()
	p := r.startProgress(a.Peer, req.To, a.Base == nil, a.Target.GUID)
	defer func() { r.endTransfer(p, err) }()
	log.Info("fetching snapshot")
	stop := p.logEvery(ctx, log, progressLogInterval)
	err = r.store.Receive(ctx, r.cfg.Volume, r.paced(ctx, p, stream))
	stop()
	if err != nil {
		log.Warn("fetch failed", zap.Int64("bytes", p.Bytes()), zap.Error(err))
		f := replica.FetchFailure{Resumed: token != "", Incremental: a.Base != nil,
			Conflict: errors.Is(err, ports.ErrConflict), BaseMismatch: errors.Is(err, ports.ErrBaseMismatch),
			Bytes: p.Bytes(), Cancelled: ctx.Err() != nil || r.peerCtx(ctx).Err() != nil, NoSpace: errors.Is(err, ports.ErrNoSpace)}
		if t, terr := r.store.ResumeToken(context.WithoutCancel(ctx), r.cfg.Volume); terr == nil && t != "" {
			f.PartialKept = true
		}
		v := replica.OnFetchFailure(f)
		switch {
		case v.Modified:
			return fmt.Errorf("%w: %w", replica.ErrModified, err)
		case v.CheckForeign:
			if gerr := r.guardDiscard(ctx, req.From); gerr != nil {
				return errors.Join(err, gerr)
			}
		}
		if v.DiscardPartial {
			why := "the peer sent nothing for the resume token"
			if f.NoSpace {
				why = "the pool is full"
			}
			log.Warn(why+": discarding the partial receive", zap.Error(err))
			if derr := r.store.DiscardPartial(ctx, r.cfg.Volume); derr != nil {
				return errors.Join(err, derr)
			}
			return err
		}
		if v.KeepTarget {
			return fmt.Errorf("%w: %w", replica.ErrPartialKept, err)
		}
		return err
	}
	if token != "" {
		// A resumed stream completes the transfer that was interrupted,
		// which may be of an older target than a.Target: the machine plans
		// again from what the store now holds.
		log.Info("resumed transfer completed", zap.Int64("bytes", p.Bytes()))
		return nil
	}
	if err := r.landed(ctx, a.Target); err != nil {
		return err
	}
	log.Info("snapshot received", zap.Int64("bytes", p.Bytes()), zap.Float64("MBps", p.Rate()/1e6), zap.Duration("took", p.Elapsed()))
	return nil
}

// replace receives a full stream of the target into staging while the old
// copy stays; once it is complete, it records that this replica holds
// nothing (so the old copy is no longer counted) and only then swaps.
func (r *Replicator) replace(ctx context.Context, a replica.Replace) (err error) {
	if err := r.guardDiscard(ctx, "", a.KeepAs); err != nil {
		return err
	}
	if a.KeepAs != "" {
		// Before a byte is received: without room for the copy, the old
		// one stays as it is.
		what := fmt.Sprintf("replacing its copy with %s from %s: %s", replica.SnapshotName(a.Target), a.Peer, a.Reason)
		if err := r.keepAside(ctx, a.KeepAs, discarded(a.Discard), what); err != nil {
			return err
		}
	}
	req := ports.SendRequest{Volume: r.cfg.Volume, To: replica.SnapshotName(a.Target), Accept: r.cfg.Accept}
	log := r.log.With(zap.String("peer", string(a.Peer)), zap.String("snapshot", req.To), zap.String("stream", streamReplacement))
	stream, err := r.openFetch(ctx, a.Peer, req, a.Target, false)
	if err != nil {
		r.openFailed()
		return err
	}
	defer stream.Close()
	p := r.startProgress(a.Peer, req.To, true, a.Target.GUID)
	defer func() { r.endTransfer(p, err) }()
	log.Info("fetching a full copy to replace the local one", zap.String("discarding", fmt.Sprint(snapNames(a.Discard))), zap.String("reason", a.Reason))
	stop := p.logEvery(ctx, log, progressLogInterval)
	err = r.store.ReceiveReplacement(ctx, r.cfg.Volume, r.paced(ctx, p, stream), func(ctx context.Context) error {
		if err := r.guardDiscard(ctx, "", a.KeepAs); err != nil {
			return err
		}
		if err := r.update(ctx, func(s *replica.State) error { return replica.Report(s, r.cfg.Node, replica.Snap{}, false) }); err != nil {
			return fmt.Errorf("recording the replacement: %w", err)
		}
		log.Warn("replica shares no snapshot with the newest: replacing it", zap.String("discarding", fmt.Sprint(snapNames(a.Discard))), zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "Replaced",
			Message: fmt.Sprintf("replica on %s replaced its copy %v with %s from %s: %s", r.cfg.Node, snapNames(a.Discard), req.To, a.Peer, a.Reason)})
		return nil
	})
	stop()
	if err != nil {
		log.Warn("replacement failed; the old copy is kept", zap.Int64("bytes", p.Bytes()), zap.Error(err))
		return err
	}
	if err := r.landed(ctx, a.Target); err != nil {
		return err
	}
	log.Info("copy replaced", zap.Int64("bytes", p.Bytes()), zap.Float64("MBps", p.Rate()/1e6), zap.Duration("took", p.Elapsed()))
	return nil
}

// The kinds of stream a fetch receives, in the "stream" field of its log
// lines: what a reader of the logs (or a test) counts.
const (
	streamFull        = "full"        // no local data: the whole snapshot, into staging
	streamIncremental = "incremental" // from a base both sides hold
	streamResumed     = "resumed"     // the rest of an interrupted receive (OpenZFS)
	streamReplacement = "replacement" // a full copy that replaces a diverged one
)

// paced is what a receive reads from a peer's stream: limited to
// MaxTransferRate, counted for the transfer's progress.
func (r *Replicator) paced(ctx context.Context, p *Progress, stream io.Reader) io.Reader {
	return p.reader(LimitReader(ctx, stream, r.cfg.MaxTransferRate, r.cfg.Clock))
}

// startProgress tracks a transfer for the status endpoint and the log; a
// full stream is about as long as the snapshot the peer listed.
func (r *Replicator) startProgress(peer replica.Node, name string, full bool, guid uint64) *Progress {
	var total int64
	if full {
		r.mu.Lock()
		total = r.peerSizes[guid]
		r.mu.Unlock()
	}
	p := newProgress(string(peer), name, total)
	r.setTransfer(p)
	return p
}

// landed checks that the snapshot received is the one asked for, by GUID.
func (r *Replicator) landed(ctx context.Context, target replica.Snap) error {
	list, err := r.store.ListSnapshots(ctx, r.cfg.Volume)
	if err != nil {
		return err
	}
	for _, s := range toSnaps(list) {
		if s == target {
			return nil
		}
	}
	return fmt.Errorf("received %s, but no snapshot with GUID %d is there", replica.SnapshotName(target), target.GUID)
}

// openFailed counts a transfer that failed before a byte came (the peer
// unreachable or refusing, its send failing): a failed transfer too.
func (r *Replicator) openFailed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Totals.Transfers++
	r.status.Totals.TransferFailures++
}

// endTransfer counts the transfer p, ended with err, and clears it.
func (r *Replicator) endTransfer(p *Progress, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transfer = nil
	t := &r.status.Totals
	t.Transfers++
	if err != nil {
		t.TransferFailures++
	}
	t.TransferredBytes += p.Bytes()
	t.TransferSeconds += p.Elapsed().Seconds()
}

func (r *Replicator) setTransfer(p *Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transfer = p
}

// leave runs the safe-deletion protocol: leave the list by compare-and-swap
// (refused unless enough up-to-date replicas remain), re-read the list and
// verify the holders are still there, and only then destroy the local copy.
func (r *Replicator) leave(ctx context.Context, a replica.LeaveVolume) error {
	// A former primary's CSI snapshot (a VolumeSnapshot's data) is never
	// destroyed with the copy, not even when the volume is deleted: it
	// outlives its volume, and the copy stays until it is deleted. (The
	// copy kept aside snapshots the volume under KeepAs for a moment.)
	if err := r.guardDiscard(ctx, "", a.KeepAs); err != nil {
		return err
	}
	if a.VolumeGone {
		return r.leaveDeleted(ctx, a.Holds)
	}
	holds := a.Holds
	if a.KeepAs != "" {
		// The copy may hold a fenced term's writes: kept aside before
		// anything changes; without the copy, the replica stays listed
		// and nothing is destroyed (retried).
		kept, err := r.keepBeforeLeaving(ctx, a)
		if err != nil || !kept {
			return err // refused, not kept, or the state gone (the orphan rule ran)
		}
		holds.Kept = a.KeepAs
	}
	var verdict replica.DeletionVerdict
	_, err := r.updateState(ctx, func(s *replica.State) error {
		v, err := replica.Leave(s, r.cfg.Node, holds, a.VolumeGone)
		verdict = v
		return err
	})
	if errors.Is(err, ports.ErrNotFound) {
		// The state went: replica.CanDestroyOrphan.
		return r.destroyOrphan(ctx, a.Holds, a.VolumeGone)
	}
	if err != nil {
		r.log.Warn("keeping the local copy", zap.String("reason", verdict.Reason), zap.Error(err))
		return err
	}
	if !a.VolumeGone && len(verdict.Holders) > 0 {
		st, err := r.read(ctx)
		if err != nil {
			return fmt.Errorf("re-reading the replica list after leaving: %w", err)
		}
		if ok, still := replica.HoldersRemain(st, verdict.Holders); !ok {
			return fmt.Errorf("after leaving, only %d of the holders %v remain (replicationFactor %d): %w", still, verdict.Holders, st.ReplicationFactor, replica.ErrUnsafe)
		}
	}
	if err := r.store.DestroyVolume(ctx, r.cfg.Volume); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return err
	}
	r.log.Info("local copy destroyed", zap.String("reason", verdict.Reason), zap.String("holders", fmt.Sprint(verdict.Holders)))
	return nil
}

// keepBeforeLeaving keeps the copy aside as a.KeepAs, but only for a leave
// the safe-deletion rule allows, judged first on a fresh read as if the
// copy were kept: a refused leave (a copy that is not surplus) makes no
// full copy of the volume, which may not even fit in a stop's grace
// period. It reports false, with nothing kept, when the volume's state is
// gone (the copy then goes by the orphan rule: destroyed here).
func (r *Replicator) keepBeforeLeaving(ctx context.Context, a replica.LeaveVolume) (bool, error) {
	st, err := r.read(ctx)
	if errors.Is(err, ports.ErrNotFound) {
		return false, r.destroyOrphan(ctx, a.Holds, a.VolumeGone)
	}
	if err != nil {
		return false, err
	}
	probe := a.Holds
	probe.Kept = a.KeepAs
	if v, err := replica.Leave(&st, r.cfg.Node, probe, false); err != nil {
		r.log.Warn("keeping the local copy", zap.String("reason", v.Reason), zap.Error(err))
		return false, err
	}
	gone := "its whole copy, up to " + replica.SnapshotName(a.Holds.Newest)
	if !a.Holds.Unchanged {
		gone += " and what was written after it"
	}
	what := "leaving the volume: its copy is destroyed once it is kept"
	if err := r.keepAside(ctx, a.KeepAs, gone, what); err != nil {
		return false, err
	}
	return true, nil
}

// leaveDeleted destroys the copy of a volume being deleted and then
// removes its entry (replica.Leave on a Deleting state): in this order, a
// crash in between leaves an entry without a copy, which the next volume
// manager removes, never a copy nobody lists. The last entry's removal
// removes the state (ports.ClusterState.Delete). A state gone meanwhile
// (its finalizer removed by hand) leaves the copy to the orphan rule.
func (r *Replicator) leaveDeleted(ctx context.Context, holds replica.Holding) error {
	st, err := r.read(ctx)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		return r.destroyOrphan(ctx, holds, true)
	case err != nil:
		return err
	case !st.Deleting:
		return fmt.Errorf("the volume is not being deleted on a fresh read: %w", replica.ErrUnsafe)
	}
	if err := r.store.DestroyVolume(ctx, r.cfg.Volume); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("destroying the copy of a deleted volume: %w", err)
	}
	// The copy is gone: the entry must follow, or the volume's object
	// waits for ever. A failed write is retried for a while, even past a
	// stop's deadline.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		_, err = r.cluster.Update(wctx, r.cfg.Volume, func(s *replica.State) error {
			_, err := replica.Leave(s, r.cfg.Node, replica.Holding{}, true)
			return err
		})
		if err == nil || errors.Is(err, ports.ErrNotFound) {
			break
		}
		r.log.Warn("the copy of a deleted volume is destroyed, its entry not yet removed; retrying", zap.Error(err))
		select {
		case <-wctx.Done():
			return fmt.Errorf("leaving the list of a deleted volume (its copy is destroyed): %w", err)
		case <-time.After(wait):
		}
	}
	r.log.Info("local copy destroyed", zap.String("reason", "the volume is being deleted"))
	return nil
}

// destroyOrphan applies replica.CanDestroyOrphan to a copy whose volume's
// state no longer exists (markSeen: the replica saw Ferry's deletion mark
// on it), and destroys it if allowed. A copy kept is reported: a log line
// and an event naming the dataset.
func (r *Replicator) destroyOrphan(ctx context.Context, holds replica.Holding, markSeen bool) error {
	verdict := replica.CanDestroyOrphan(holds, markSeen)
	if !verdict.Allowed {
		dataset := string(r.cfg.Volume)
		if info, err := r.store.GetVolume(ctx, r.cfg.Volume); err == nil && info.MountSource != "" {
			dataset = info.MountSource
		}
		msg := fmt.Sprintf("copy %s kept: %s", dataset, verdict.Reason)
		if msg != r.lastKept {
			r.lastKept = msg
			r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "CopyKept", Message: msg})
		}
		r.log.Warn("keeping the local copy", zap.String("dataset", dataset), zap.String("reason", verdict.Reason))
		return fmt.Errorf("%s: %w", verdict.Reason, replica.ErrUnsafe)
	}
	if err := r.store.DestroyVolume(ctx, r.cfg.Volume); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return err
	}
	r.log.Info("local copy destroyed", zap.String("reason", verdict.Reason))
	return nil
}

// Terminate runs the safe-deletion protocol (SIGTERM): it returns nil once
// the local copy is destroyed, or ErrUnsafe (wrapped) when the rule keeps
// it; the copy is then left in place for the next volume manager. A
// volume whose shared state no longer exists keeps its copy unless this
// replica saw Ferry's deletion mark on it (replica.CanDestroyOrphan): a
// missing object is not a deletion. Call it after Run returned, from the
// same goroutine's view.
func (r *Replicator) Terminate(ctx context.Context) error {
	r.terminating = true
	_ = r.m.Step(replica.Terminate{})
	for attempt := 0; attempt < 3; attempt++ {
		// The safe-deletion rule is applied to what the store holds now.
		r.settle(ctx, true)
		if r.m.Left() {
			return nil
		}
		_ = r.m.Step(replica.Tick{}) // lift the back-off and try once more
	}
	r.mu.Lock()
	last := r.status.LastError
	r.mu.Unlock()
	return fmt.Errorf("local copy kept: %s: %w", last, replica.ErrUnsafe)
}

// guardDiscard refuses to discard snapshots that are not Ferry's
// replication snapshots (a CSI VolumeSnapshot a former primary took):
// those after the snapshot named `after` for a rollback, or any at all
// when the whole copy would go (after == ""). It raises an event, since
// only an operator (or the snapshot's deletion) can settle it.
//
// A snapshot named in except is not counted (one Ferry makes for a moment).
func (r *Replicator) guardDiscard(ctx context.Context, after string, except ...string) error {
	list, err := r.store.ListSnapshots(ctx, r.cfg.Volume)
	if errors.Is(err, ports.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	stored := make([]replica.StoredSnapshot, len(list))
	for i, s := range list {
		stored[i] = replica.StoredSnapshot{Name: s.Name, Txg: s.CreateTxg}
	}
	foreign, err := replica.ForeignAfter(stored, after, except...)
	if errors.Is(err, replica.ErrSnapshotGone) {
		return fmt.Errorf("rollback to %s: %w", after, ports.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if len(foreign) == 0 {
		return nil
	}
	msg := fmt.Sprintf("replica on %s keeps its copy: discarding it would destroy snapshots that are not replication snapshots: %v", r.cfg.Node, foreign)
	r.mu.Lock()
	repeated := r.lastBlocked == msg
	r.lastBlocked = msg
	r.mu.Unlock()
	if !repeated { // raised once per situation, not on every retry
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "DiscardBlocked", Message: msg})
	}
	return fmt.Errorf("%s: %w", msg, replica.ErrUnsafe)
}

// LeaveHere runs the safe-deletion protocol for node's copy of volume id
// in this process, with no volume manager running for it (the node's
// daemon, for a copy found without a pod: orchestration.Adopter): nil
// once the copy is destroyed and its entry removed, replica.ErrUnsafe
// (wrapped) when the rule keeps the copy. It transfers nothing.
func LeaveHere(ctx context.Context, node replica.Node, id volume.ID, store Store, cluster ports.ClusterState, events ports.EventRecorder, log *zap.Logger) error {
	r := New(Config{Node: node, Volume: id, Tick: time.Second, SnapshotInterval: time.Second, Keep: 1},
		store, unwatched{cluster}, noTransport{}, events, log)
	return r.Terminate(ctx)
}

// unwatched is a shared state read without a watch: a leaving replica
// only reads and writes it.
type unwatched struct{ ports.ClusterState }

func (unwatched) Watch(context.Context, volume.ID) (<-chan struct{}, error) {
	return nil, fmt.Errorf("a leaving replica watches nothing: %w", ports.ErrUnsupported)
}

// noTransport reaches no peer: a leaving replica fetches nothing.
type noTransport struct{}

func (noTransport) Snapshots(context.Context, replica.Node, volume.ID) ([]ports.SnapshotInfo, error) {
	return nil, fmt.Errorf("a leaving replica reads no peer: %w", ports.ErrUnavailable)
}

func (noTransport) Fetch(context.Context, replica.Node, ports.SendRequest) (io.ReadCloser, error) {
	return nil, fmt.Errorf("a leaving replica fetches nothing: %w", ports.ErrUnavailable)
}
