package zfs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	gozfs "github.com/mistifyio/go-zfs/v3"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// CreateVolume creates the dataset with its quota, reservation, properties
// and Ferry metadata in one `zfs create`, so it never exists unmarked.
func (s *Store) CreateVolume(ctx context.Context, id volume.ID, opts ports.CreateOptions) (ports.VolumeInfo, error) {
	size := strconv.FormatInt(opts.CapacityBytes, 10)
	args := []string{"create", "-o", "refquota=" + size, "-o", "refreservation=" + size}
	args = append(args, optionArgs(opts.Properties, "")...)
	meta := withDriver(opts.Metadata, s.cfg.Driver)
	delete(meta, ports.MetaEncryption) // the store's record, from opts.Encryption only
	args = append(args, optionArgs(meta, userPropPrefix)...)
	enc, err := s.encryptionArgs(opts.Encryption)
	if err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: %w", id, err)
	}
	args = append(args, enc...)
	args = append(args, s.dataset(id))
	if opts.Encryption.On() {
		// keylocation=prompt: zfs reads the key from stdin, once (not a
		// terminal), and loads it.
		_, err = s.run.zfsStdin(ctx, opts.Key.Bytes(), args...)
	} else {
		_, err = s.run.zfs(ctx, args...)
	}
	if err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: %w", id, err)
	}
	return s.GetVolume(ctx, id)
}

// optionArgs renders -o key=value pairs in a stable order.
func optionArgs(m map[string]string, prefix string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var args []string
	for _, k := range keys {
		args = append(args, "-o", prefix+k+"="+m[k])
	}
	return args
}

func withDriver(meta map[string]string, driver string) map[string]string {
	out := map[string]string{ports.MetaDriver: driver}
	for k, v := range meta {
		if k != ports.MetaDriver {
			out[k] = v
		}
	}
	return out
}

// GetVolume describes a volume Ferry owns. A dataset of that name without
// Ferry's mark answers ErrNotOwned.
func (s *Store) GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error) {
	rows, err := s.get(ctx, s.dataset(id))
	if err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("volume %s: %w", id, err)
	}
	if len(rows) != 1 {
		return ports.VolumeInfo{}, fmt.Errorf("volume %s: zfs get returned %d datasets", id, len(rows))
	}
	if !s.owned(rows[0]) {
		return ports.VolumeInfo{}, fmt.Errorf("volume %s: dataset %s: %w", id, rows[0].name, ports.ErrNotOwned)
	}
	return s.volumeInfo(id, rows[0]), nil
}

// ListVolumes lists the owned filesystems directly under the parent.
func (s *Store) ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error) {
	rows, err := s.getDepth(ctx, 1, s.root)
	if err != nil {
		return nil, err
	}
	var out []ports.VolumeInfo
	for _, r := range rows {
		id, ok := s.childID(r.name)
		if ok && s.owned(r) {
			out = append(out, s.volumeInfo(id, r))
		}
	}
	sortVolumes(out)
	return out, nil
}

// childID returns the volume ID of a direct child filesystem of the parent.
func (s *Store) childID(name string) (volume.ID, bool) {
	prefix := s.root + "/"
	if len(name) <= len(prefix) || name[:len(prefix)] != prefix {
		return "", false
	}
	id, err := volume.ParseID("dataset", name[len(prefix):])
	if err != nil {
		return "", false
	}
	return id, true
}

// DestroyVolume destroys the dataset and its snapshots, refusing datasets
// Ferry does not own. It unmounts first: zfs-fuse answers "dataset is busy"
// to destroying a mounted dataset, and a FUSE mount may stay busy for a
// moment after a bind mount of it went away, so busy is retried briefly.
//
// An interrupted, resumable receive kept for the volume goes with it, also
// when the volume itself is missing (deleted during its first full fetch:
// the partial copy lives only in the staging dataset); the answer is then
// still ErrNotFound.
func (s *Store) DestroyVolume(ctx context.Context, id volume.ID) error {
	err := s.destroyDataset(ctx, id)
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return err
	}
	if serr := s.destroyIfExists(ctx, s.staging(id)); serr != nil {
		return fmt.Errorf("destroy volume %s: its staging dataset: %w", id, serr)
	}
	return err
}

// destroyDataset destroys the volume's own dataset and snapshots, leaving
// its staging dataset alone.
func (s *Store) destroyDataset(ctx context.Context, id volume.ID) error {
	s.forget(id)
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	ds := &gozfs.Dataset{Name: s.dataset(id)}
	err := retryBusy(ctx, func() error {
		if err := s.unmount(ctx, s.dataset(id)); err != nil && !errors.Is(err, ports.ErrBusy) {
			return err
		}
		if err := s.run.goZFS("destroy", func() error { return ds.Destroy(gozfs.DestroyRecursive) }); err != nil {
			return goZFSError(err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("destroy volume %s: %w", id, err)
	}
	return nil
}

// unmount unmounts a dataset; one that is not mounted is fine.
// The zfs CLI's word is checked against this process's mount table: a
// mount it left behind at the dataset's mountpoint is unmounted directly
// (see unmountLeftover); a bind mount of it elsewhere is left alone.
func (s *Store) unmount(ctx context.Context, dataset string) error {
	mountpoint := ""
	if out, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "mountpoint", dataset); err == nil {
		mountpoint = strings.TrimSpace(string(out))
	}
	_, err := s.run.zfs(ctx, "unmount", dataset)
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Stderr, "not currently mounted") {
		err = nil
	}
	if err != nil {
		return err
	}
	return unmountLeftover(dataset, mountpoint, s.cfg.HostRoot)
}

// Resize grows (or shrinks, if the data fits) the quota and reservation.
// The quota moves first when growing and last when shrinking, because ZFS
// refuses a reservation above the quota; a failed second step is undone.
func (s *Store) Resize(ctx context.Context, id volume.ID, capacityBytes int64) error {
	info, err := s.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	ds := &gozfs.Dataset{Name: s.dataset(id)}
	size := strconv.FormatInt(capacityBytes, 10)
	old := strconv.FormatInt(info.CapacityBytes, 10)
	first, second := "refquota", "refreservation"
	if capacityBytes < info.CapacityBytes {
		first, second = second, first
	}
	if err := s.run.goZFS("set", func() error { return ds.SetProperty(first, size) }); err != nil {
		return fmt.Errorf("resize volume %s: %w", id, goZFSError(err))
	}
	if err := s.run.goZFS("set", func() error { return ds.SetProperty(second, size) }); err != nil {
		if undo := s.run.goZFS("set", func() error { return ds.SetProperty(first, old) }); undo != nil {
			err = errors.Join(err, undo)
		}
		return fmt.Errorf("resize volume %s: %w", id, goZFSError(err))
	}
	return nil
}

// SetProperties sets native properties on a volume, one `zfs set` each.
func (s *Store) SetProperties(ctx context.Context, id volume.ID, properties map[string]string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	ds := &gozfs.Dataset{Name: s.dataset(id)}
	keys := make([]string, 0, len(properties))
	for k := range properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := s.run.goZFS("set", func() error { return ds.SetProperty(k, properties[k]) }); err != nil {
			return fmt.Errorf("set %s on volume %s: %w", k, id, goZFSError(err))
		}
	}
	return nil
}

// SetMetadata sets Ferry user properties on a volume.
func (s *Store) SetMetadata(ctx context.Context, id volume.ID, metadata map[string]string) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	return s.setMeta(s.dataset(id), metadata)
}

func (s *Store) setMeta(target string, metadata map[string]string) error {
	ds := &gozfs.Dataset{Name: target}
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := s.run.goZFS("set", func() error { return ds.SetProperty(userPropPrefix+k, metadata[k]) }); err != nil {
			return fmt.Errorf("set %s on %s: %w", k, target, goZFSError(err))
		}
	}
	return nil
}

// Remount implements ports.SnapshotStore: ErrBusy while the dataset is
// mounted anywhere but its mountpoint (a pod's bind mount: nothing is
// unmounted from under it); else unmount (retried while briefly busy),
// then mount.
func (s *Store) Remount(ctx context.Context, id volume.ID) error {
	info, err := s.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	ds := s.dataset(id)
	if err := s.unmountOwn(ctx, ds, info.MountPath); err != nil {
		return fmt.Errorf("remount volume %s: %w", id, err)
	}
	// Unmounted: the mount is made whatever happens to the caller's
	// context, or the dataset stays unmounted and a read-only publish
	// would bind the bare mountpoint directory.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), remountTimeout)
	defer cancel()
	if _, err := s.run.zfs(mctx, "mount", ds); err != nil && !strings.Contains(err.Error(), "already mounted") {
		return fmt.Errorf("remount volume %s: mounting: %w", id, err)
	}
	return nil
}

// remountTimeout bounds the mount step of a remount, which no caller
// cancels.
const remountTimeout = 2 * time.Minute

// Unchanged implements ports.SnapshotStore with the written property
// (bytes written since the newest snapshot; OpenZFS prints exactly "0"
// when none, without -p). zfs-fuse has no such property: it cannot tell.
//
// OpenZFS counts written only in synced transaction groups: right after
// a write it can still read 0 (seen on 2.3: 0 after a 256 KiB write,
// 282K after a sync). Written only grows until the next snapshot, so a
// non-zero read is the truth at once; a 0 is believed only if it is
// still 0 after a pool sync that started after the read (shared by the
// store's callers, see poolSync). A failed sync means "cannot tell".
func (s *Store) Unchanged(ctx context.Context, id volume.ID) (bool, error) {
	zero, err := s.writtenZero(ctx, id)
	if err != nil || !zero {
		return false, err
	}
	if err := s.txg.after(ctx, func(ctx context.Context) error {
		_, err := s.run.zpool(ctx, "sync", s.cfg.Pool)
		return err
	}); err != nil {
		return false, nil
	}
	return s.writtenZero(ctx, id)
}

// writtenZero reads the written property: whether it says 0.
func (s *Store) writtenZero(ctx context.Context, id volume.ID) (bool, error) {
	if s.noWritten.Load() {
		return false, nil
	}
	out, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "written", s.dataset(id))
	var ce *CommandError
	if errors.As(err, &ce) && strings.Contains(ce.Stderr, "invalid property") {
		s.noWritten.Store(true) // the same zfs answers the same: one command per interval saved
		return false, nil
	}
	if err != nil {
		return false, err
	}
	// Without a snapshot, written is everything referenced: never 0 for a
	// filesystem (its metadata alone takes blocks).
	return strings.TrimSpace(string(out)) == "0", nil
}

// unmountOwn unmounts dataset ds from its own mountpoint (retried while
// briefly busy); ErrBusy, nothing done, while it is mounted anywhere else
// (a pod's bind mount).
func (s *Store) unmountOwn(ctx context.Context, ds, mountPath string) error {
	if others := otherMounts(ds, mountPath, s.cfg.HostRoot); len(others) > 0 {
		return fmt.Errorf("mounted at %v: %w", others, ports.ErrBusy)
	}
	return retryBusy(ctx, func() error { return s.unmount(ctx, ds) })
}
