//go:build linux

package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Linux is the Linux ports.Mounter.
//
// Every path below a target's Root is resolved with openat2(2) and
// RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH, and every change is made relative
// to a descriptor of the directory that was checked (mkdirat, unlinkat,
// a bind mount onto /proc/self/fd/N, an unmount of
// /proc/self/fd/<parent>/<name> with UMOUNT_NOFOLLOW), so that a symlink
// swapped into the path after a check is never followed.
type Linux struct {
	Table
	// beforeMount, when set, runs between the check of the target and the
	// mount: a test seam to swap a symlink in at that moment.
	beforeMount func()
}

var _ ports.Mounter = Linux{}

// BindMount creates target's last component if needed and bind-mounts
// source there; a read-only bind needs a second, remounting call (the
// kernel ignores MS_RDONLY on the first).
func (l Linux) BindMount(ctx context.Context, source string, t volume.Target, readOnly bool) (err error) {
	if _, err := os.Stat(source); err != nil {
		return fmt.Errorf("bind source %s: %w", source, err)
	}
	parent, err := openParent(t)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	created := false
	switch err := unix.Mkdirat(parent, t.Name, 0o750); {
	case err == nil:
		created = true
	case errors.Is(err, unix.EEXIST):
	default:
		return pathError("create", t, err)
	}
	defer func() {
		if err != nil && created {
			_ = unix.Unlinkat(parent, t.Name, unix.AT_REMOVEDIR)
		}
	}()
	dir, err := openChild(parent, t)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	if l.beforeMount != nil {
		l.beforeMount()
	}
	if err := unix.Mount(source, fdPath(dir), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", source, t.Path(), err)
	}
	if !readOnly {
		return nil
	}
	// Reopened, the name now resolves to the new mount's root, which is
	// what a remount must name.
	top, err := openChild(parent, t)
	if err == nil {
		err = unix.Mount("", fdPath(top), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
		unix.Close(top)
	}
	if err != nil {
		_ = unix.Unmount(childPath(parent, t), unix.UMOUNT_NOFOLLOW)
		return fmt.Errorf("remount %s read-only: %w", t.Path(), err)
	}
	return nil
}

// Unmount unmounts the topmost mount at target.
func (l Linux) Unmount(ctx context.Context, t volume.Target) error {
	parent, err := openParent(t)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	switch err := unix.Unmount(childPath(parent, t), unix.UMOUNT_NOFOLLOW); {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return nil // EINVAL: not a mount point
	case errors.Is(err, unix.EBUSY):
		return fmt.Errorf("unmount %s: %v: %w", t.Path(), err, ports.ErrBusy)
	default:
		return fmt.Errorf("unmount %s: %w", t.Path(), err)
	}
}

// RemoveDir removes target if it is an empty directory: rmdir(2) itself
// refuses anything else, so nothing is judged and then removed.
func (l Linux) RemoveDir(t volume.Target) (bool, error) {
	parent, err := openParent(t)
	if errors.Is(err, unix.ENOENT) {
		return false, nil // nothing there
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(parent)
	switch err := unix.Unlinkat(parent, t.Name, unix.AT_REMOVEDIR); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTDIR):
		return false, nil
	case errors.Is(err, unix.EBUSY):
		return false, fmt.Errorf("remove %s: %v: %w", t.Path(), err, ports.ErrBusy)
	default:
		return false, fmt.Errorf("remove %s: %w", t.Path(), err)
	}
}

// beneath resolves below a directory descriptor, refusing every symlink
// and every way out of it.
const beneath = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH

// openParent opens target's parent directory (O_PATH) below its Root.
// ErrInvalid when it does not exist (Ferry creates only the last
// component; the kubelet creates the parent) or the way there crosses a
// symlink or something that is not a directory.
func openParent(t volume.Target) (int, error) {
	root, err := unix.Open(t.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open kubelet directory %s: %w", t.Root, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, t.Parent, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return -1, pathError("open the parent of", t, err)
	}
	return fd, nil
}

// openChild opens target itself (O_PATH) below its open parent: it must
// be a directory, not a symlink.
func openChild(parent int, t volume.Target) (int, error) {
	fd, err := unix.Openat2(parent, t.Name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: beneath})
	if err != nil {
		return -1, pathError("open", t, err)
	}
	return fd, nil
}

// pathError classifies an error met walking a target: the path's shape
// (a symlink, a non-directory, a way out) is the caller's mistake.
func pathError(what string, t volume.Target, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%s target %s: it crosses a symlink, a non-directory or a missing directory: %w: %w", what, t.Path(), err, ports.ErrInvalid)
	}
	return fmt.Errorf("%s target %s: %w", what, t.Path(), err)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// childPath names target through its parent's descriptor, so that only
// the last component is looked up again (and UMOUNT_NOFOLLOW refuses it
// if it became a symlink).
func childPath(parent int, t volume.Target) string { return fdPath(parent) + "/" + t.Name }

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
