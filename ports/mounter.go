package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
)

// MountTable reads the node's mount table. The controller needs only this
// (is a volume published on this node?); the node plugin mounts as well.
type MountTable interface {
	// MountAt describes the topmost mount at the path target, as the
	// kernel spells mount points (resolved, without symlinks); ok is false
	// when target is not a mount point (or does not exist).
	MountAt(target string) (m Mount, ok bool, err error)
	// MountsOf lists every mount point whose source is source (a dataset
	// for ZFS), sorted; the volume's own mountpoint is among them.
	MountsOf(source string) ([]string, error)
}

// Mounter makes a volume's files appear at a pod's target path.
//
// Targets are walked from target.Root without ever following a symlink:
// a target whose parent does not exist, whose path crosses a symlink, or
// whose last component exists and is not a directory answers ErrInvalid
// (wrapped), with nothing created, mounted, unmounted or removed.
type Mounter interface {
	MountTable
	// BindMount mounts source at target, read-only when asked. It creates
	// target's last component (a directory) if missing and nothing else,
	// and removes it again when the mount fails. The mount is made through
	// a descriptor of the directory it checked, so a symlink swapped in
	// after the check is never followed.
	BindMount(ctx context.Context, source string, target volume.Target, readOnly bool) error
	// Unmount removes the topmost mount at target; no mount there is a
	// no-op. ErrBusy while the mount is in use.
	Unmount(ctx context.Context, target volume.Target) error
	// RemoveDir removes target when it is an empty directory that is not a
	// mount point; removed is false, with no error, when target is absent,
	// not a directory or not empty: it is left as it is.
	RemoveDir(target volume.Target) (removed bool, err error)
	// Stats reports space and inode usage of the filesystem at path.
	// ErrNotFound if path does not exist.
	Stats(path string) (FsStats, error)
}

// Mount is one entry of the mount table.
type Mount struct {
	Source   string // the mounted filesystem's source (a dataset for ZFS)
	ReadOnly bool
}

// FsStats is a filesystem's usage.
type FsStats struct {
	TotalBytes, AvailableBytes, UsedBytes int64
	TotalInodes, FreeInodes, UsedInodes   int64
}
