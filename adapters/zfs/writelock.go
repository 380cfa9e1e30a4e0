package zfs

import (
	"context"
	"fmt"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

var _ ports.WriteLock = (*Store)(nil)

// LockWrites implements ports.WriteLock: readonly=on, which takes effect
// on the mounted filesystem at once (every mount of it, in every mount
// namespace), recorded first (MetaWritesLocked: a lock whose record
// exists is always lifted by UnlockWrites, even if this process dies
// between the two).
func (s *Store) LockWrites(ctx context.Context, id volume.ID, reason string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	if reason == "" {
		reason = "locked"
	}
	ds := s.dataset(id)
	if err := s.setMeta(ds, map[string]string{ports.MetaWritesLocked: reason}); err != nil {
		return err
	}
	if _, err := s.run.zfs(ctx, "set", "readonly=on", ds); err != nil {
		return fmt.Errorf("lock writes of volume %s: %w", id, err)
	}
	return nil
}

// UnlockWrites implements ports.WriteLock: readonly back to its inherited
// value, then the record removed.
func (s *Store) UnlockWrites(ctx context.Context, id volume.ID) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	ds := s.dataset(id)
	if _, err := s.run.zfs(ctx, "inherit", "readonly", ds); err != nil {
		return fmt.Errorf("unlock writes of volume %s: %w", id, err)
	}
	if _, err := s.run.zfs(ctx, "inherit", userPropPrefix+ports.MetaWritesLocked, ds); err != nil {
		return fmt.Errorf("unlock writes of volume %s: remove its record: %w", id, err)
	}
	return nil
}
