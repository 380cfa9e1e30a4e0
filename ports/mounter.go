package ports

import "context"

// Mounter makes a volume's files appear at a pod's target path.
type Mounter interface {
	// BindMount mounts source at target, read-only when asked. target must
	// exist. Mounting the same source at the same target again is a no-op.
	BindMount(ctx context.Context, source, target string, readOnly bool) error
	// Unmount removes the mount at target; no mount there is a no-op.
	Unmount(ctx context.Context, target string) error
	// MountAt describes what is mounted at target; ok is false when target
	// is not a mount point (or does not exist).
	MountAt(target string) (m Mount, ok bool, err error)
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
