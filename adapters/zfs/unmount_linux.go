//go:build linux

package zfs

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/adapters/mount"

	"github.com/ferry-csi/ferry/ports"
)

// unmountLeftover unmounts the dataset's filesystem where it is still
// mounted at its own mountpoint in this process's mount namespace after
// `zfs unmount` said it was done. Seen with zfs-fuse's CLI in a container:
// it answers 0 and leaves the mount, and the dataset then stays "busy" for
// destroy and rename. Only mounts of the dataset itself at mountpoint are
// touched: a pod's bind mount of it elsewhere is never unmounted (the
// caller answers ErrBusy instead).
func unmountLeftover(dataset, mountpoint, hostRoot string) error {
	mounted, err := mountsOf(dataset, hostRoot)
	if err != nil || mountpoint == "" {
		return nil // no mount table to check, or no mountpoint: nothing to do
	}
	for i := len(mounted) - 1; i >= 0; i-- { // the newest first
		if mounted[i] != mountpoint {
			continue
		}
		if err := unix.Unmount(mounted[i], 0); err != nil && err != unix.EINVAL {
			if err == unix.EBUSY {
				return fmt.Errorf("unmount %s: %v: %w", mounted[i], err, ports.ErrBusy)
			}
			return fmt.Errorf("unmount %s: %w", mounted[i], err)
		}
	}
	return nil
}

// mountsOf lists where this process's mount table shows the dataset
// mounted, oldest first, but for the views below hostRoot (Config.HostRoot:
// the host's zfs mounts there, and the mount shows at the mountpoint too).
func mountsOf(dataset, hostRoot string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounted []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescapeMount(fields[sep+2]) != dataset || !strings.HasPrefix(fields[4], "/") {
			continue
		}
		if mp := unescapeMount(fields[4]); !below(mp, hostRoot) {
			mounted = append(mounted, mp)
		}
	}
	return mounted, sc.Err()
}

// otherMounts lists the mounts of dataset other than at its own
// mountpoint (pods' bind mounts).
func otherMounts(dataset, mountpoint, hostRoot string) []string {
	mounted, _ := mountsOf(dataset, hostRoot)
	var out []string
	for _, m := range mounted {
		if m != mountpoint {
			out = append(out, m)
		}
	}
	return out
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space) in
// mountinfo paths.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// below reports whether path is root or lies below it; nothing is below
// "" (no host root).
func below(path, root string) bool { return root != "" && mount.Below(path, root) }
