//go:build linux

package mount

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/ports"
)

// Linux is the Linux ports.Mounter.
type Linux struct {
	// MountInfo is the mount table to read; empty means /proc/self/mountinfo.
	MountInfo string
}

var _ ports.Mounter = Linux{}

func (l Linux) table() string {
	if l.MountInfo == "" {
		return "/proc/self/mountinfo"
	}
	return l.MountInfo
}

// BindMount creates target if needed and bind-mounts source there; a
// read-only bind needs a second, remounting call (the kernel ignores
// MS_RDONLY on the first).
func (l Linux) BindMount(ctx context.Context, source, target string, readOnly bool) error {
	if _, err := os.Stat(source); err != nil {
		return fmt.Errorf("bind source %s: %w", source, err)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return fmt.Errorf("bind target %s: %w", target, err)
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, target, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// Unmount unmounts every mount stacked at target, then removes the
// directory. Both steps are no-ops when already done.
func (l Linux) Unmount(ctx context.Context, target string) error {
	for {
		_, mounted, err := l.MountAt(target)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(target, 0); err != nil {
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("unmount %s: %v: %w", target, err, ports.ErrBusy)
			}
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", target, err)
	}
	return nil
}

// MountAt reads the mount table for the topmost mount at target.
func (l Linux) MountAt(target string) (ports.Mount, bool, error) {
	data, err := os.ReadFile(l.table())
	if err != nil {
		return ports.Mount{}, false, err
	}
	entries, err := parseMountInfo(data)
	if err != nil {
		return ports.Mount{}, false, err
	}
	var found *entry
	for i := range entries {
		if entries[i].mountPoint == target {
			found = &entries[i] // later lines are mounted on top
		}
	}
	if found == nil {
		return ports.Mount{}, false, nil
	}
	return ports.Mount{Source: found.source, ReadOnly: found.readOnly}, true, nil
}

// Stats reads statfs(2) of path.
func (l Linux) Stats(path string) (ports.FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return ports.FsStats{}, fmt.Errorf("%s: %w", path, ports.ErrNotFound)
		}
		return ports.FsStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := int64(st.Bsize)
	s := ports.FsStats{
		TotalBytes:     int64(st.Blocks) * bs,
		AvailableBytes: int64(st.Bavail) * bs,
		TotalInodes:    int64(st.Files),
		FreeInodes:     int64(st.Ffree),
	}
	s.UsedBytes = s.TotalBytes - int64(st.Bfree)*bs
	s.UsedInodes = s.TotalInodes - s.FreeInodes
	return s, nil
}
