// Package fence is ports.Fencer on Linux: it stops the processes that
// could still write a volume through this node's mounts, then removes the
// pods' mounts. A writer is any process that holds a descriptor, working
// directory, root, executable or memory mapping on the volume's filesystem
// (found by the filesystem's device number: a bind mount shares its
// source's), or that lives in a mount namespace where the filesystem is
// mounted anywhere but at the volume's own mountpoint (a pod's container,
// which can open new files through its private copy of the pod's mount).
// Processes are found in /proc and killed (SIGKILL) by pid; a daemon with
// the host's pid namespace sees them all. This adapter decides nothing:
// the daemon's failover Guard says when and which volume.
package fence

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/ports"
)

// Fencer stops writers; see the package comment.
type Fencer struct {
	proc string // the proc filesystem
	self int
	// Rounds bounds how often the processes are scanned and killed
	// (processes may fork or be restarted while they are stopped).
	Rounds int
}

var _ ports.Fencer = (*Fencer)(nil)

// New returns a fencer reading /proc.
func New() *Fencer { return &Fencer{proc: "/proc", self: os.Getpid(), Rounds: 50} }

// Fence stops the writers of the filesystem mounted at points and
// unmounts every point but keep; see ports.Fencer.
func (f *Fencer) Fence(ctx context.Context, points []string, keep string) ([]ports.StoppedProcess, error) {
	for _, p := range append([]string{keep}, points...) {
		if !filepath.IsAbs(p) || strings.Contains(p, "..") || strings.ContainsRune(p, 0) {
			return nil, fmt.Errorf("fence: %q is not an absolute path without \"..\": %w", p, ports.ErrInvalid)
		}
	}
	devs := map[uint64]bool{}
	for _, p := range points {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("fence: stat %s: %w", p, err)
		}
		devs[st.Dev] = true
	}
	var stopped []ports.StoppedProcess
	if len(devs) > 0 {
		// Writers through descriptors and the like first: the mounts
		// cannot go while they hold them.
		s, err := f.stopAll(ctx, func(pid int) bool { return f.holds(pid, devs) })
		stopped = append(stopped, s...)
		if err != nil {
			return stopped, err
		}
	}
	for _, p := range points {
		if p == keep {
			continue
		}
		if err := f.unmount(ctx, p, devs, &stopped); err != nil {
			return stopped, err
		}
	}
	if len(devs) > 0 {
		// Then every process of a mount namespace that still shows the
		// filesystem elsewhere than at keep (a container's copy of a
		// pod's mount): it could open new files there.
		ownNS := f.mountNS(f.self)
		foreign := map[string]bool{}
		s, err := f.stopAll(ctx, func(pid int) bool {
			ns := f.mountNS(pid)
			if ns == "" || ns == ownNS {
				return false
			}
			has, seen := foreign[ns]
			if !seen {
				has = f.mountedElsewhere(pid, devs, keep)
				foreign[ns] = has
			}
			return has
		})
		stopped = append(stopped, s...)
		if err != nil {
			return stopped, err
		}
	}
	return stopped, nil
}

// stopAll kills every process match selects, scanning again until a scan
// finds none (bounded by Rounds).
func (f *Fencer) stopAll(ctx context.Context, match func(pid int) bool) ([]ports.StoppedProcess, error) {
	var stopped []ports.StoppedProcess
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return stopped, err
		}
		var victims []int
		for _, pid := range f.pids() {
			if pid <= 1 || pid == f.self {
				continue
			}
			if match(pid) {
				victims = append(victims, pid)
			}
		}
		if len(victims) == 0 {
			return stopped, nil
		}
		if round >= f.Rounds {
			return stopped, fmt.Errorf("fence: processes %v still hold the volume after %d rounds: %w", victims, round, ports.ErrBusy)
		}
		for _, pid := range victims {
			comm := f.comm(pid)
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return stopped, fmt.Errorf("fence: kill %d (%s): %w", pid, comm, err)
			}
			stopped = append(stopped, ports.StoppedProcess{PID: pid, Command: comm})
		}
		f.waitGone(ctx, victims)
	}
}

// waitGone waits (up to 5 s) until each pid is gone or a zombie: a killed
// process releases its files and mounts as it exits.
func (f *Fencer) waitGone(ctx context.Context, pids []int) {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && ctx.Err() == nil && f.alive(pid) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (f *Fencer) alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join(f.proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func (f *Fencer) pids() []int {
	ents, err := os.ReadDir(f.proc)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func (f *Fencer) comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join(f.proc, strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(b))
}

// holds reports whether pid has its working directory, root, executable,
// a descriptor or a mapping on one of devs. The links are followed into
// the process's own mount namespace by the kernel.
func (f *Fencer) holds(pid int, devs map[uint64]bool) bool {
	dir := filepath.Join(f.proc, strconv.Itoa(pid))
	on := func(p string) bool {
		var st unix.Stat_t
		return unix.Stat(p, &st) == nil && devs[st.Dev]
	}
	for _, l := range []string{"cwd", "root", "exe"} {
		if on(filepath.Join(dir, l)) {
			return true
		}
	}
	for _, sub := range []string{"fd", "map_files"} {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if on(filepath.Join(dir, sub, e.Name())) {
				return true
			}
		}
	}
	return false
}

func (f *Fencer) mountNS(pid int) string {
	l, err := os.Readlink(filepath.Join(f.proc, strconv.Itoa(pid), "ns", "mnt"))
	if err != nil {
		return ""
	}
	return l
}

// mountedElsewhere reports whether pid's mount namespace shows one of
// devs mounted at a mount point other than keep.
func (f *Fencer) mountedElsewhere(pid int, devs map[uint64]bool, keep string) bool {
	b, err := os.ReadFile(filepath.Join(f.proc, strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 5 {
			continue
		}
		maj, min, ok := strings.Cut(fs[2], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil || !devs[unix.Mkdev(uint32(ma), uint32(mi))] {
			continue
		}
		if unescapeOctal(fs[4]) != keep {
			return true
		}
	}
	return false
}

// unmount removes the mount at p; a process that grabbed the filesystem
// meanwhile is stopped and the unmount tried again.
func (f *Fencer) unmount(ctx context.Context, p string, devs map[uint64]bool, stopped *[]ports.StoppedProcess) error {
	for attempt := 0; ; attempt++ {
		if attempt > 20 {
			return fmt.Errorf("fence: %s still mounted after %d unmounts", p, attempt)
		}
		err := unix.Unmount(p, 0)
		switch {
		case err == nil:
			continue // a mount stacked below (the same target twice): again
		case errors.Is(err, unix.EINVAL):
			// Not (any more) a mount point: covered with the placeholder.
			if err := unix.Mount(ports.FencedMountSource, p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("fence: cover %s: %w", p, err)
			}
			return nil
		case errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && attempt < 10:
			s, serr := f.stopAll(ctx, func(pid int) bool { return f.holds(pid, devs) })
			*stopped = append(*stopped, s...)
			if serr != nil {
				return serr
			}
			time.Sleep(50 * time.Millisecond)
		case errors.Is(err, unix.EBUSY):
			return fmt.Errorf("fence: unmount %s: %v: %w", p, err, ports.ErrBusy)
		default:
			return fmt.Errorf("fence: unmount %s: %w", p, err)
		}
	}
}

// unescapeOctal decodes the kernel's \ooo escapes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
