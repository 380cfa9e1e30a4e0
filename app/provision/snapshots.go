package provision

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Snapshot is a CSI snapshot as the controller reports it.
type Snapshot struct {
	ID             string
	SourceVolumeID volume.ID
	CreatedAt      time.Time
	SizeBytes      int64
	ReadyToUse     bool
}

func toSnapshot(ref volume.SnapshotRef, s ports.SnapshotInfo) Snapshot {
	return Snapshot{ID: ref.ID(), SourceVolumeID: ref.Volume, CreatedAt: s.CreatedAt, SizeBytes: s.SizeBytes, ReadyToUse: true}
}

// csiSnapshots lists the CSI snapshots of one volume, or of all when id is "".
func (c *Service) csiSnapshots(ctx context.Context, id volume.ID) ([]Snapshot, error) {
	all, err := c.store.ListSnapshots(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, s := range all {
		if ref, ok := volume.SnapshotRefFromStore(s.Volume, s.Name, s.Metadata[ports.MetaSnapshotName]); ok {
			out = append(out, toSnapshot(ref, s))
		}
	}
	return out, nil
}

func (c *Service) findSnapshot(ctx context.Context, ref volume.SnapshotRef) (ports.SnapshotInfo, error) {
	snaps, err := c.store.ListSnapshots(ctx, ref.Volume)
	if err != nil {
		return ports.SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", ref.ID(), err)
	}
	for _, s := range snaps {
		if s.Name == ref.StoreName() {
			return s, nil
		}
	}
	return ports.SnapshotInfo{}, fmt.Errorf("snapshot %s: %w", ref.ID(), ports.ErrNotFound)
}

// CreateSnapshot takes a snapshot of a volume, or returns the snapshot a
// previous identical request took. Snapshot names are unique across
// volumes: the same name for another volume answers ErrIncompatible.
func (c *Service) CreateSnapshot(ctx context.Context, name, sourceVolumeID string) (Snapshot, error) {
	name, err := volume.ParseSnapshotName("name", name)
	if err != nil {
		return Snapshot{}, err
	}
	src, err := volume.ParseID("source_volume_id", sourceVolumeID)
	if err != nil {
		return Snapshot{}, err
	}
	unlock, ok := c.locks.TryLock("snapshot/"+name, "volume/"+string(src))
	if !ok {
		return Snapshot{}, fmt.Errorf("create snapshot %s: %w", name, refusal.ErrPending)
	}
	defer unlock()
	all, err := c.csiSnapshots(ctx, "")
	if err != nil {
		return Snapshot{}, err
	}
	for _, s := range all {
		ref, _ := volume.ParseSnapshotID("", s.ID)
		if ref.Name != name {
			continue
		}
		if s.SourceVolumeID != src {
			return Snapshot{}, fmt.Errorf("snapshot %s exists for volume %s: %w", name, s.SourceVolumeID, refusal.ErrIncompatible)
		}
		return s, nil
	}
	ref := volume.SnapshotRef{Volume: src, Name: name}
	info, err := c.store.CreateSnapshot(ctx, src, ref.StoreName(), map[string]string{ports.MetaSnapshotName: name})
	if err != nil {
		return Snapshot{}, err
	}
	c.log.Info("snapshot created", zap.String("volume", string(src)), zap.String("snapshot", ref.ID()))
	return toSnapshot(ref, info), nil
}

// DeleteSnapshot destroys a snapshot; one that does not exist (or an ID no
// snapshot can have) is already deleted.
func (c *Service) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if snapshotID == "" {
		return &volume.InvalidError{Field: "snapshot_id", Reason: "must not be empty"}
	}
	ref, err := volume.ParseSnapshotID("snapshot_id", snapshotID)
	if err != nil {
		return nil
	}
	unlock, ok := c.locks.TryLock("snapshot/"+ref.Name, "volume/"+string(ref.Volume))
	if !ok {
		return fmt.Errorf("delete snapshot %s: %w", ref.ID(), refusal.ErrPending)
	}
	defer unlock()
	err = c.store.DestroySnapshot(ctx, ref.Volume, ref.StoreName())
	switch {
	case err == nil:
		c.log.Info("snapshot deleted", zap.String("volume", string(ref.Volume)), zap.String("snapshot", ref.ID()))
		return nil
	case errors.Is(err, ports.ErrNotFound):
		return nil
	case errors.Is(err, ports.ErrBusy), errors.Is(err, ports.ErrNotOwned):
		return fmt.Errorf("snapshot %s: %w: %w", ref.ID(), refusal.ErrPrecondition, err)
	default:
		return err
	}
}

// ListSnapshots lists CSI snapshots, filtered by snapshot ID or source
// volume ID; filters naming nothing that can exist give an empty list.
func (c *Service) ListSnapshots(ctx context.Context, snapshotID, sourceVolumeID string, maxEntries int, startingToken string) ([]Snapshot, string, error) {
	if maxEntries < 0 {
		return nil, "", &volume.InvalidError{Field: "max_entries", Reason: "must not be negative"}
	}
	var scope volume.ID
	if sourceVolumeID != "" {
		id, err := volume.ParseID("source_volume_id", sourceVolumeID)
		if err != nil {
			return nil, "", nil
		}
		scope = id
	}
	var want volume.SnapshotRef
	if snapshotID != "" {
		ref, err := volume.ParseSnapshotID("snapshot_id", snapshotID)
		if err != nil || (scope != "" && ref.Volume != scope) {
			return nil, "", nil
		}
		want, scope = ref, ref.Volume
	}
	snaps, err := c.csiSnapshots(ctx, scope)
	if errors.Is(err, ports.ErrNotFound) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	if want.Name != "" {
		var only []Snapshot
		for _, s := range snaps {
			if s.ID == want.ID() {
				only = append(only, s)
			}
		}
		snaps = only
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].ID < snaps[j].ID })
	return page(snaps, maxEntries, startingToken, func(s Snapshot) string { return s.ID })
}
