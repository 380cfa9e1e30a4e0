package app

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// exec carries out one action of the machine.
func (r *Replicator) exec(ctx context.Context, a replica.Action) error {
	switch a := a.(type) {
	case replica.ReportSnapshot:
		_, err := r.cluster.Update(ctx, r.cfg.Volume, func(s *replica.State) error {
			replica.Join(s, r.cfg.Node)
			return replica.Report(s, r.cfg.Node, a.Snap, a.Ready)
		})
		if err == nil {
			r.log.Info("replica reported", zap.Uint64("snapshot", uint64(a.Snap.Number)), zap.Uint64("epoch", uint64(a.Snap.Epoch)), zap.Bool("ready", a.Ready))
		}
		return err
	case replica.ReadPeer:
		list, err := r.transport.Snapshots(ctx, a.Peer, r.cfg.Volume)
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
		peerSnaps := toSnaps(list)
		if err := r.restampEpochs(ctx, peerSnaps); err != nil {
			return err
		}
		return r.m.Step(replica.PeerRead{Peer: a.Peer, Snaps: peerSnaps})
	case replica.Fetch:
		return r.fetch(ctx, a)
	case replica.Rollback:
		if err := r.guardDiscard(ctx, replica.SnapshotName(a.To.Number)); err != nil {
			return err
		}
		r.log.Warn("replica diverged: rolling back", zap.Uint64("snapshot", uint64(a.To.Number)),
			zap.String("discarding", fmt.Sprint(snapNames(a.Discard))), zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "RolledBack",
			Message: fmt.Sprintf("replica on %s rolled back to %s, discarding %v: %s", r.cfg.Node, replica.SnapshotName(a.To.Number), snapNames(a.Discard), a.Reason)})
		return r.store.Rollback(ctx, r.cfg.Volume, replica.SnapshotName(a.To.Number))
	case replica.Replace:
		if err := r.guardDiscard(ctx, ""); err != nil {
			return err
		}
		r.log.Warn("replica shares no snapshot with the newest: replacing it", zap.String("discarding", fmt.Sprint(snapNames(a.Discard))), zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "Replaced",
			Message: fmt.Sprintf("replica on %s discarded %v: %s", r.cfg.Node, snapNames(a.Discard), a.Reason)})
		if err := r.store.DestroyVolume(ctx, r.cfg.Volume); err != nil && !errors.Is(err, ports.ErrNotFound) {
			return err
		}
		return nil
	case replica.TakeSnapshot:
		name := replica.SnapshotName(a.Number)
		info, err := r.store.CreateSnapshot(ctx, r.cfg.Volume, name, map[string]string{ports.MetaEpoch: strconv.FormatUint(uint64(a.Epoch), 10)})
		if err != nil {
			return err
		}
		r.log.Info("snapshot taken", zap.String("snapshot", name), zap.Uint64("epoch", uint64(a.Epoch)), zap.Int64("bytes", info.SizeBytes))
		return nil
	case replica.DestroySnapshots:
		for _, s := range a.Snaps {
			err := r.store.DestroySnapshot(ctx, r.cfg.Volume, replica.SnapshotName(s.Number))
			if err != nil && !errors.Is(err, ports.ErrNotFound) {
				return err
			}
		}
		r.log.Info("old snapshots destroyed", zap.String("snapshots", fmt.Sprint(snapNames(a.Snaps))))
		return nil
	case replica.LeaveVolume:
		return r.leave(ctx, a)
	case replica.Alert:
		r.log.Error("replicas conflict: nothing discarded, an operator must decide", zap.String("reason", a.Reason))
		r.events.Record(ctx, r.cfg.Volume, ports.Event{Type: ports.EventWarning, Reason: "Conflict", Message: a.Reason})
		return nil
	}
	return fmt.Errorf("unknown action %T", a)
}

func snapNames(s []replica.Snap) []string {
	out := make([]string, 0, len(s))
	for _, x := range s {
		out = append(out, fmt.Sprintf("%s(epoch %d)", replica.SnapshotName(x.Number), x.Epoch))
	}
	return out
}

// fetch receives a snapshot from a peer and checks that what arrived is the
// snapshot asked for (by GUID).
func (r *Replicator) fetch(ctx context.Context, a replica.Fetch) error {
	req := ports.SendRequest{Volume: r.cfg.Volume, To: replica.SnapshotName(a.Target.Number)}
	if a.Base != nil {
		req.From = replica.SnapshotName(a.Base.Number)
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
		log.Info("resuming an interrupted transfer")
	}
	stream, err := r.transport.Fetch(ctx, a.Peer, req)
	if err != nil {
		if token != "" && (errors.Is(err, ports.ErrInvalid) || errors.Is(err, ports.ErrNotFound)) {
			// The peer cannot resume it (the snapshot is gone, the token is
			// stale): start over from the last complete snapshot next time.
			log.Warn("the peer cannot resume the transfer: discarding the partial receive", zap.Error(err))
			if derr := r.store.DiscardPartial(ctx, r.cfg.Volume); derr != nil {
				return errors.Join(err, derr)
			}
		}
		return err
	}
	defer stream.Close()
	var total int64
	if a.Base == nil { // a full stream is about as long as the snapshot
		r.mu.Lock()
		total = r.peerSizes[a.Target.GUID]
		r.mu.Unlock()
	}
	p := newProgress(string(a.Peer), req.To, total)
	r.setTransfer(p)
	defer r.setTransfer(nil)
	log.Info("fetching snapshot")
	stop := p.logEvery(ctx, log, progressLogInterval)
	err = r.store.Receive(ctx, r.cfg.Volume, p.reader(stream))
	stop()
	if err != nil {
		if errors.Is(err, ports.ErrConflict) && a.Base != nil {
			// A secondary changed after its newest snapshot (it is never
			// mounted for writing; an atime update is enough): those changes
			// are not the volume's, so the replica returns to the snapshot,
			// unless that would destroy a snapshot that is not Ferry's.
			log.Warn("replica changed since its newest snapshot: rolling back to it before retrying", zap.Error(err))
			if gerr := r.guardDiscard(ctx, req.From); gerr != nil {
				return errors.Join(err, gerr)
			}
			if rerr := r.store.Rollback(ctx, r.cfg.Volume, req.From); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		if errors.Is(err, ports.ErrBaseMismatch) && a.Base != nil {
			// The base is not the newest snapshot here: either the plan is
			// stale (planned again next tick), or a snapshot that is not
			// Ferry's sits after it, which only an operator can settle.
			if gerr := r.guardDiscard(ctx, req.From); gerr != nil {
				return errors.Join(err, gerr)
			}
		}
		log.Warn("fetch failed", zap.Int64("bytes", p.Bytes()), zap.Error(err))
		return err
	}
	if token != "" {
		// A resumed stream completes the transfer that was interrupted,
		// which may be of an older target than a.Target: the machine plans
		// again from what the store now holds; the epoch is stamped from
		// the peer's listing by GUID.
		log.Info("resumed transfer completed", zap.Int64("bytes", p.Bytes()))
		return nil
	}
	local, _, err := r.local(ctx)
	if err != nil {
		return err
	}
	for _, s := range local {
		if s.Number == a.Target.Number && s.GUID == a.Target.GUID {
			// The stream carries no metadata: record the epoch the peer listed.
			if err := r.store.SetSnapshotMetadata(ctx, r.cfg.Volume, req.To, map[string]string{ports.MetaEpoch: strconv.FormatUint(uint64(a.Target.Epoch), 10)}); err != nil {
				return err
			}
			log.Info("snapshot received", zap.Int64("bytes", p.Bytes()), zap.Float64("MBps", p.Rate()/1e6), zap.Duration("took", p.Elapsed()))
			return nil
		}
	}
	return fmt.Errorf("received %s, but no snapshot with GUID %d is there", req.To, a.Target.GUID)
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
	if !a.VolumeGone {
		if err := r.guardDiscard(ctx, ""); err != nil {
			return err
		}
	}
	var verdict replica.DeletionVerdict
	_, err := r.cluster.Update(ctx, r.cfg.Volume, func(s *replica.State) error {
		v, err := replica.Leave(s, r.cfg.Node, a.Holds, a.VolumeGone)
		verdict = v
		return err
	})
	if errors.Is(err, ports.ErrNotFound) {
		verdict, err = replica.DeletionVerdict{Allowed: true, Reason: "the volume's state is gone"}, nil
	}
	if err != nil {
		r.log.Warn("keeping the local copy", zap.String("reason", verdict.Reason), zap.Error(err))
		return err
	}
	if !a.VolumeGone && len(verdict.Holders) > 0 {
		st, err := r.cluster.Get(ctx, r.cfg.Volume)
		if err != nil {
			return fmt.Errorf("re-reading the replica list after leaving: %w", err)
		}
		still := 0
		for _, h := range verdict.Holders {
			if _, ok := st.Replica(h); ok {
				still++
			}
		}
		if still < st.ReplicationFactor {
			return fmt.Errorf("after leaving, only %d of the holders %v remain (replicationFactor %d): %w", still, verdict.Holders, st.ReplicationFactor, replica.ErrUnsafe)
		}
	}
	if err := r.store.DestroyVolume(ctx, r.cfg.Volume); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return err
	}
	r.log.Info("local copy destroyed", zap.String("reason", verdict.Reason), zap.String("holders", fmt.Sprint(verdict.Holders)))
	return nil
}

// Terminate runs the safe-deletion protocol (SIGTERM): it returns nil once
// the local copy is destroyed, or ErrUnsafe (wrapped) when the rule keeps
// it; the copy is then left in place for the next volume manager.
func (r *Replicator) Terminate(ctx context.Context, volumeGone bool) error {
	_ = r.m.Step(replica.Terminate{VolumeGone: volumeGone})
	for attempt := 0; attempt < 3; attempt++ {
		r.settle(ctx)
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
func (r *Replicator) guardDiscard(ctx context.Context, after string) error {
	list, err := r.store.ListSnapshots(ctx, r.cfg.Volume)
	if errors.Is(err, ports.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var since uint64
	if after != "" {
		found := false
		for _, s := range list {
			if s.Name == after {
				since, found = s.CreateTxg, true
			}
		}
		if !found {
			return fmt.Errorf("rollback to %s: %w", after, ports.ErrNotFound)
		}
	}
	var foreign []string
	for _, s := range list {
		if _, ok := replica.ParseSnapshotName(s.Name); !ok && (after == "" || s.CreateTxg > since) {
			foreign = append(foreign, s.Name)
		}
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

// restampEpochs records, on local snapshots whose epoch is unknown (a
// receive whose bookkeeping was interrupted), the epoch the peer lists for
// the same GUID. It uses the snapshots observed just before this action
// rather than listing them again on every peer read.
func (r *Replicator) restampEpochs(ctx context.Context, peer []replica.Snap) error {
	byGUID := make(map[uint64]replica.Epoch, len(peer))
	for _, s := range peer {
		if s.Epoch > 0 {
			byGUID[s.GUID] = s.Epoch
		}
	}
	for _, s := range r.observedLocal {
		if e, ok := byGUID[s.GUID]; ok && s.Epoch == 0 {
			name := replica.SnapshotName(s.Number)
			if err := r.store.SetSnapshotMetadata(ctx, r.cfg.Volume, name, map[string]string{ports.MetaEpoch: strconv.FormatUint(uint64(e), 10)}); err != nil {
				return err
			}
			r.log.Info("epoch recorded on a received snapshot", zap.String("snapshot", name), zap.Uint64("epoch", uint64(e)))
		}
	}
	return nil
}
