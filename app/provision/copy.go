package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// copyFromSnapshot makes volume id a full, independent copy of a CSI
// snapshot by streaming it through the store (send | receive), the same path
// replication uses. A clone would be faster but would pin the snapshot: it
// could not be deleted while the volume lives.
func (c *Service) copyFromSnapshot(ctx context.Context, t newVolume, snapshotID string) (ports.VolumeInfo, error) {
	ref, err := volume.ParseSnapshotID("volume_content_source.snapshot.snapshot_id", snapshotID)
	if err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("source snapshot %q: %w", snapshotID, ports.ErrNotFound)
	}
	snap, from, err := c.findSnapshotOrPeer(ctx, ref)
	if err != nil {
		return ports.VolumeInfo{}, err
	}
	t.size = sizeForCopy(t.size, t.sizeUnset, snap.SizeBytes)
	if snap.SizeBytes > t.size {
		return ports.VolumeInfo{}, fmt.Errorf("%w: snapshot %s holds %d bytes, more than the %d requested", volume.ErrOutOfRange, snapshotID, snap.SizeBytes, t.size)
	}
	req := ports.SendRequest{Volume: ref.Volume, To: ref.StoreName()}
	if from == "" {
		return c.copy(ctx, t, req)
	}
	// Another node's: fetched over the peer stream, as a copy is.
	req.Accept = c.pool.StreamFeatures()
	c.log.Info("restoring a snapshot from a peer", zap.String("snapshot", ref.ID()), zap.String("peer", string(from)),
		zap.String("volume", string(t.id)), zap.Int64("bytes", snap.SizeBytes))
	// The transfer is not bound to this call: a snapshot larger than what
	// the provisioner's timeout lets through would otherwise start over at
	// every retry and never end. It goes on after the call gave up, under
	// the volume's lock, so that a retry meanwhile answers Aborted
	// (refusal.ErrPending) and the one after it finds the volume made. A
	// peer that stops sending is cut off by the transport (its stream's
	// idle timeout).
	start := time.Now()
	info, err := c.receiveCopy(context.WithoutCancel(ctx), t, req, func(ctx context.Context) (io.ReadCloser, error) {
		return c.peers.Transport.Fetch(ctx, from, req)
	}, snap.GUID)
	if err != nil {
		c.log.Warn("restoring a snapshot from a peer failed", zap.String("snapshot", ref.ID()), zap.String("peer", string(from)),
			zap.String("volume", string(t.id)), zap.Error(err))
		return info, err
	}
	c.log.Info("snapshot restored from a peer", zap.String("snapshot", ref.ID()), zap.String("peer", string(from)),
		zap.String("volume", string(t.id)), zap.Duration("took", time.Since(start)))
	return info, nil
}

// peerListTimeout bounds a peer's answer to the listing a restore asks
// every node for.
const peerListTimeout = 10 * time.Second

// findSnapshotOrPeer finds a CSI snapshot in this node's pool, else (with
// WithPeers) on the first peer that holds it (placement.SnapshotSources:
// the volume's copies first, then every node with a lease). ErrNotFound
// when no node answered that it holds it and every node answered;
// ErrUnavailable when one that might hold it did not answer.
func (c *Service) findSnapshotOrPeer(ctx context.Context, ref volume.SnapshotRef) (ports.SnapshotInfo, replica.Node, error) {
	snap, err := c.findSnapshot(ctx, ref)
	if !errors.Is(err, ports.ErrNotFound) || c.peers.Transport == nil {
		return snap, "", err
	}
	var copies, nodes []replica.Node
	if c.repl.Cluster != nil {
		if st, err := c.repl.Cluster.Get(ctx, ref.Volume); err == nil {
			for _, r := range st.Replicas {
				copies = append(copies, r.Node)
			}
		}
	}
	leases, lerr := c.peers.Nodes.Leases(ctx)
	if lerr != nil {
		c.log.Warn("the nodes to ask for a snapshot are not known: asking the volume's copies only", zap.String("snapshot", ref.ID()), zap.Error(lerr))
	}
	for n := range leases {
		nodes = append(nodes, n)
	}
	// Every node is asked at once, each for at most peerListTimeout (a
	// lease outlives its node: a node gone must not hold the call), and
	// the first in SnapshotSources' order that holds it is chosen.
	order := placement.SnapshotSources(c.cfg.Node, copies, nodes)
	type answer struct {
		list []ports.SnapshotInfo
		err  error
	}
	answers := make([]answer, len(order))
	var wg sync.WaitGroup
	for i, n := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, peerListTimeout)
			defer cancel()
			list, err := c.peers.Transport.CSISnapshots(actx, n, ref.Volume)
			answers[i] = answer{list, err}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ports.SnapshotInfo{}, "", ctx.Err()
	}
	var said []string
	unavailable := lerr != nil
	for i, n := range order {
		list, err := answers[i].list, answers[i].err
		switch {
		case errors.Is(err, ports.ErrNotFound):
			said = append(said, fmt.Sprintf("%s: no such volume", n))
			continue
		case err != nil:
			unavailable = unavailable || !errors.Is(err, ports.ErrNotOwned)
			said = append(said, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		for _, s := range list {
			if s.Name == ref.StoreName() {
				return s, n, nil
			}
		}
		said = append(said, fmt.Sprintf("%s: not there", n))
	}
	kind := ports.ErrNotFound
	if unavailable {
		kind = ports.ErrUnavailable
	}
	return ports.SnapshotInfo{}, "", fmt.Errorf("snapshot %s is not in this node's pool, nor on a peer (%s): %w", ref.ID(), strings.Join(said, "; "), kind)
}

// copyFromVolume copies a volume through a temporary snapshot of it.
func (c *Service) copyFromVolume(ctx context.Context, t newVolume, sourceID string) (ports.VolumeInfo, error) {
	src, err := volume.ParseID("volume_content_source.volume.volume_id", sourceID)
	if err != nil || src == t.id {
		// A volume cannot be its own source: it does not exist yet.
		return ports.VolumeInfo{}, fmt.Errorf("source volume %q: %w", sourceID, ports.ErrNotFound)
	}
	unlock, ok := c.locks.TryLock("volume/" + string(src))
	if !ok {
		// Being made, published or copied here: asked again later.
		return ports.VolumeInfo{}, fmt.Errorf("source volume %s: %w", src, refusal.ErrPending)
	}
	info, err := c.store.GetVolume(ctx, src)
	if errors.Is(err, ports.ErrNotFound) {
		// No copy here: nothing of this node's to hold locked for the
		// length of a transfer from a peer.
		unlock()
		return c.copyFromPeerCopy(ctx, t, src, err)
	}
	defer unlock()
	if err != nil {
		return ports.VolumeInfo{}, err
	}
	t.size = sizeForCopy(t.size, t.sizeUnset, info.CapacityBytes)
	if info.CapacityBytes > t.size {
		return ports.VolumeInfo{}, fmt.Errorf("%w: source volume %s has %d bytes, more than the %d requested", volume.ErrOutOfRange, src, info.CapacityBytes, t.size)
	}
	tmp := "copy-" + volume.Digest(string(t.id))
	// A snapshot left by an interrupted attempt is stale: take a fresh one.
	if err := c.store.DestroySnapshot(ctx, src, tmp); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return ports.VolumeInfo{}, err
	}
	if _, err := c.store.CreateSnapshot(ctx, src, tmp, nil); err != nil {
		return ports.VolumeInfo{}, err
	}
	defer func() {
		if err := c.store.DestroySnapshot(context.WithoutCancel(ctx), src, tmp); err != nil {
			c.log.Warn("temporary snapshot not destroyed", zap.String("volume", string(src)), zap.String("snapshot", tmp), zap.Error(err))
		}
	}()
	return c.copy(ctx, t, ports.SendRequest{Volume: src, To: tmp})
}

// copyFromPeerCopy clones a replicated volume this node holds no copy of
// from a copy holding its newest snapshot (placement.CloneSources, tried
// in order; each asked first whether it still lists that snapshot, with
// the GUID recorded), fetched whole over the peer stream as a restore from
// a peer is: the clone is the volume as of that snapshot (its final one
// once no pod writes it; at most a snapshot interval behind while one
// does). Nothing is written on the peer. A volume of one copy, held on
// another node, is still not found here (notHere). No copy answering, or
// the snapshot pruned meanwhile (a newer one taken): Unavailable, and the
// provisioner retries on the volume's state as it is then.
func (c *Service) copyFromPeerCopy(ctx context.Context, t newVolume, src volume.ID, notHere error) (ports.VolumeInfo, error) {
	if c.peers.Transport == nil || c.repl.Cluster == nil {
		return ports.VolumeInfo{}, notHere
	}
	st, err := c.repl.Cluster.Get(ctx, src)
	if errors.Is(err, ports.ErrNotFound) {
		return ports.VolumeInfo{}, fmt.Errorf("source volume %s is not on this node, and has no other copy to clone from (a volume of one copy is cloned on its node): %w", src, ports.ErrNotFound)
	}
	if err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("source volume %s: its copies: %w", src, err)
	}
	snap, sources := placement.CloneSources(st, c.cfg.Node)
	if len(sources) == 0 {
		return ports.VolumeInfo{}, fmt.Errorf("source volume %s: no other copy holds a snapshot to clone from now (none yet, a copy not yet heard from, or the volume being deleted): %w", src, ports.ErrUnavailable)
	}
	name := replica.SnapshotName(snap)
	var said []string
	for _, from := range sources {
		lctx, cancel := context.WithTimeout(ctx, peerListTimeout)
		list, err := c.peers.Transport.Snapshots(lctx, from, src)
		cancel()
		if err != nil {
			said = append(said, fmt.Sprintf("%s: %v", from, err))
			continue
		}
		size := int64(-1)
		for _, l := range list {
			if l.Name == name && l.GUID == snap.GUID {
				size = l.SizeBytes
			}
		}
		if size < 0 {
			said = append(said, fmt.Sprintf("%s: no longer lists %s", from, name))
			continue
		}
		t.size = sizeForCopy(t.size, t.sizeUnset, max(st.CapacityBytes, size))
		if need := max(st.CapacityBytes, size); need > t.size {
			return ports.VolumeInfo{}, fmt.Errorf("%w: source volume %s has %d bytes, more than the %d requested", volume.ErrOutOfRange, src, need, t.size)
		}
		return c.fetchClone(ctx, t, src, from, snap)
	}
	return ports.VolumeInfo{}, fmt.Errorf("source volume %s: no copy to clone %s from answered (%s): %w", src, name, strings.Join(said, "; "), ports.ErrUnavailable)
}

// fetchClone receives snap of src from node from as the clone t.
func (c *Service) fetchClone(ctx context.Context, t newVolume, src volume.ID, from replica.Node, snap replica.Snap) (ports.VolumeInfo, error) {
	req := ports.SendRequest{Volume: src, To: replica.SnapshotName(snap), Accept: c.pool.StreamFeatures()}
	c.log.Info("cloning a volume from a peer's copy", zap.String("source", string(src)), zap.String("snapshot", req.To), zap.String("peer", string(from)),
		zap.String("volume", string(t.id)))
	start := time.Now()
	// Not bound to the call, as a restore from a peer (copyFromSnapshot).
	info, err := c.receiveCopy(context.WithoutCancel(ctx), t, req, func(ctx context.Context) (io.ReadCloser, error) {
		r, err := c.peers.Transport.Fetch(ctx, from, req)
		if errors.Is(err, ports.ErrNotFound) {
			// Pruned since it was listed (a newer one taken): the next
			// attempt clones the newer.
			err = fmt.Errorf("snapshot %s of %s, gone from %s since it was listed: %w", req.To, src, from, ports.ErrUnavailable)
		}
		return r, err
	}, snap.GUID)
	if err != nil {
		c.log.Warn("cloning a volume from a peer's copy failed", zap.String("source", string(src)), zap.String("peer", string(from)),
			zap.String("volume", string(t.id)), zap.Error(err))
		return info, err
	}
	c.log.Info("volume cloned from a peer's copy", zap.String("source", string(src)), zap.String("snapshot", req.To), zap.String("peer", string(from)),
		zap.String("volume", string(t.id)), zap.Duration("took", time.Since(start)))
	return info, nil
}

// sizeForCopy: a copy requested without a capacity range is as large as
// its source (at least the default), never refused for being too small.
func sizeForCopy(size int64, unset bool, source int64) int64 {
	if !unset {
		return size
	}
	need, err := volume.CapacityRange{RequiredBytes: source}.Choose()
	if err != nil {
		return size
	}
	return max(size, need)
}

// newVolume is what a copy must become: its ID, size (and whether the
// request left the size to the driver), StorageClass properties and
// metadata.
type newVolume struct {
	id         volume.ID
	size       int64
	sizeUnset  bool
	properties map[string]string
	metadata   map[string]string
}

// copy streams req into a new volume, drops the snapshot the stream
// brought, then sets the size, the StorageClass's properties (a stream
// carries none) and the metadata; on any failure it destroys what it made.
// Metadata goes last: a volume without its name is recognised as an
// incomplete copy by a retried CreateVolume.
func (c *Service) copy(ctx context.Context, t newVolume, req ports.SendRequest) (ports.VolumeInfo, error) {
	return c.receiveCopy(ctx, t, req, func(ctx context.Context) (io.ReadCloser, error) {
		stream, err := c.store.Send(ctx, req)
		if errors.Is(err, volume.ErrNotFerrysKey) {
			c.sendRefused(ctx, req.Volume, t.id, err)
		}
		return stream, err
	}, 0)
}

// receiveCopy is copy with the stream of req from open (this node's pool,
// or a peer's); guid, when not 0, is the snapshot's GUID as listed, which
// the snapshot received must have (not another made since under its name).
func (c *Service) receiveCopy(ctx context.Context, t newVolume, req ports.SendRequest, open func(context.Context) (io.ReadCloser, error), guid uint64) (info ports.VolumeInfo, err error) {
	id := t.id
	stream, err := open(ctx)
	if err != nil {
		return ports.VolumeInfo{}, err
	}
	defer stream.Close()
	if err := c.store.Receive(ctx, id, stream); err != nil {
		// What an interrupted receive kept to resume is nobody's to
		// resume here: a retry starts a new stream.
		if derr := c.store.DiscardPartial(context.WithoutCancel(ctx), id); derr != nil && !errors.Is(derr, ports.ErrNotFound) {
			err = errors.Join(err, fmt.Errorf("discarding the partial receive: %w", derr))
		}
		return ports.VolumeInfo{}, err
	}
	defer func() {
		if err != nil {
			if derr := c.store.DestroyVolume(context.WithoutCancel(ctx), id); derr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up the partial copy: %w", derr))
			}
		}
	}()
	if guid != 0 {
		snaps, err := c.store.ListSnapshots(ctx, id)
		if err != nil {
			return ports.VolumeInfo{}, err
		}
		got := uint64(0)
		for _, s := range snaps {
			if s.Name == req.To {
				got = s.GUID
			}
		}
		if got != guid {
			return ports.VolumeInfo{}, fmt.Errorf("the stream of snapshot %s brought GUID %d, not the %d listed: %w", req.To, got, guid, ports.ErrConflict)
		}
	}
	if err := c.store.DestroySnapshot(ctx, id, req.To); err != nil {
		return ports.VolumeInfo{}, err
	}
	if err := c.store.Resize(ctx, id, t.size); err != nil {
		return ports.VolumeInfo{}, err
	}
	if err := c.store.SetProperties(ctx, id, t.properties); err != nil {
		return ports.VolumeInfo{}, err
	}
	if err := c.store.SetMetadata(ctx, id, t.metadata); err != nil {
		return ports.VolumeInfo{}, err
	}
	info, err = c.store.GetVolume(ctx, id)
	if err == nil && volume.Encrypted(info.Metadata[ports.MetaEncryption], info.Encryption) {
		// The source was encrypted: its raw stream made a copy under the
		// source's key, not the new volume's class's. Not kept (yet).
		return ports.VolumeInfo{}, fmt.Errorf("volume %s is encrypted: a restore or clone of it: %w", req.Volume, volume.ErrUnsupported)
	}
	return info, err
}

// ReasonSendRefused is the event of a volume whose copy was refused for
// encryption reasons (volume.ErrNotFerrysKey: encryption Ferry does not
// manage, or a record the pool contradicts).
const ReasonSendRefused = "SendRefused"

// sendRefused tells the operator, on the source volume, that a copy of it
// was refused for encryption reasons: an event where a recorder is
// reachable, an Error log with the volume in any case.
func (c *Service) sendRefused(ctx context.Context, src, dst volume.ID, err error) {
	c.log.Error("copy refused for encryption reasons", zap.String("volume", string(src)), zap.String("copy", string(dst)), zap.Error(err))
	c.warn(ctx, src, ReasonSendRefused, "a copy of volume %s (for %s) was refused: %v", src, dst, err)
}
