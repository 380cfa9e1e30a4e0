package zfs

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	gozfs "github.com/mistifyio/go-zfs/v3"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// CreateSnapshot takes a snapshot with its metadata set atomically
// (`zfs snapshot -o`, on both CLIs).
func (s *Store) CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (ports.SnapshotInfo, error) {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return ports.SnapshotInfo{}, err
	}
	args := append([]string{"snapshot"}, optionArgs(metadata, userPropPrefix)...)
	args = append(args, s.snapshot(id, name))
	if _, err := s.run.zfs(ctx, args...); err != nil {
		return ports.SnapshotInfo{}, fmt.Errorf("snapshot %s@%s: %w", id, name, err)
	}
	rows, err := s.get(ctx, s.snapshot(id, name))
	if err != nil {
		return ports.SnapshotInfo{}, err
	}
	return s.snapshotInfo(id, rows[0]), nil
}

// SetSnapshotMetadata sets Ferry user properties on one snapshot.
func (s *Store) SetSnapshotMetadata(ctx context.Context, id volume.ID, name string, metadata map[string]string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	if _, err := s.get(ctx, s.snapshot(id, name)); err != nil {
		return fmt.Errorf("snapshot %s@%s: %w", id, name, err)
	}
	return s.setMeta(s.snapshot(id, name), metadata)
}

// ListSnapshots lists one volume's snapshots, or every owned volume's.
func (s *Store) ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error) {
	var rows []*propRow
	var err error
	if id == "" {
		rows, err = s.getDepth(ctx, 2, s.root)
	} else {
		// One command: the volume's own row (depth 0) says whether Ferry
		// owns it, as GetVolume would, and its snapshots come with it.
		rows, err = s.getDepth(ctx, 1, s.dataset(id))
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", id, err)
		}
		i := slices.IndexFunc(rows, func(r *propRow) bool { return r.name == s.dataset(id) })
		if i < 0 {
			return nil, fmt.Errorf("volume %s: zfs get did not list the dataset itself", id)
		}
		if !s.owned(rows[i]) {
			return nil, fmt.Errorf("volume %s: dataset %s: %w", id, rows[i].name, ports.ErrNotOwned)
		}
	}
	if err != nil {
		return nil, err
	}
	owned := map[string]bool{}
	var out []ports.SnapshotInfo
	for _, r := range rows {
		if r.native["type"] == "filesystem" {
			owned[r.name] = s.owned(r)
			continue
		}
		ds, _, ok := strings.Cut(r.name, "@")
		if r.native["type"] != "snapshot" || !ok || !owned[ds] {
			continue
		}
		vid, ok := s.childID(ds)
		if !ok {
			continue
		}
		out = append(out, s.snapshotInfo(vid, r))
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Volume != out[j].Volume {
			return out[i].Volume < out[j].Volume
		}
		return out[i].CreateTxg < out[j].CreateTxg
	})
	return out, nil
}

// DestroySnapshot destroys one snapshot of an owned volume.
func (s *Store) DestroySnapshot(ctx context.Context, id volume.ID, name string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	ds := &gozfs.Dataset{Name: s.snapshot(id, name), Type: gozfs.DatasetSnapshot}
	if err := s.run.goZFS("destroy", func() error { return ds.Destroy(gozfs.DestroyDefault) }); err != nil {
		return fmt.Errorf("destroy snapshot %s@%s: %w", id, name, goZFSError(err))
	}
	return nil
}

// Rollback rolls the volume back to snapshot name, destroying newer ones.
func (s *Store) Rollback(ctx context.Context, id volume.ID, name string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	ds := &gozfs.Dataset{Name: s.snapshot(id, name), Type: gozfs.DatasetSnapshot}
	if err := s.run.goZFS("rollback", func() error { return ds.Rollback(true) }); err != nil {
		return fmt.Errorf("rollback %s to %s: %w", id, name, goZFSError(err))
	}
	return nil
}
