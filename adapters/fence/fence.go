//go:build linux

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

// Options configure a Fencer; the zero value is the defaults.
type Options struct {
	// Proc is where the proc filesystem is mounted ("/proc"). It must
	// belong to the fencer's own pid namespace: the pids read there are
	// the pids signalled.
	Proc string
	// Rounds bounds how often the processes are scanned and the writers
	// killed (50): a writer may fork, or be restarted, while it is being
	// stopped.
	Rounds int
	// Wait bounds how long one round waits for the processes it killed to
	// exit (10 s); what still holds the filesystem then is found again by
	// the next round.
	Wait time.Duration
	// BusyRetries bounds how often an unmount that answers EBUSY once the
	// writers are gone is tried again, each after a new scan (5).
	BusyRetries int
}

// Fencer is the Linux ports.Fencer; see the package comment.
type Fencer struct {
	opts Options
}

var (
	_ ports.Fencer        = (*Fencer)(nil)
	_ ports.HolderStopper = (*Fencer)(nil)
)

// New returns a Fencer with opts, defaults filled in.
func New(opts Options) *Fencer {
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 50
	}
	if opts.Wait <= 0 {
		opts.Wait = 10 * time.Second
	}
	if opts.BusyRetries <= 0 {
		opts.BusyRetries = 5
	}
	return &Fencer{opts: opts}
}

// Fence kills every process holding the filesystems mounted at points,
// scanning again until a scan finds none, then unmounts every point but
// keep; see ports.Fencer. A point that is not (any more) a mount point is
// skipped: its directory lies on another filesystem, whose processes
// must not be taken for the volume's. A point on the root filesystem is
// refused (ErrInvalid), as is a path that is not absolute and clean.
func (f *Fencer) Fence(ctx context.Context, points []string, keep string) ([]ports.StoppedProcess, error) {
	for _, p := range points {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	if keep != "" {
		if err := checkPath(keep); err != nil {
			return nil, err
		}
	}
	self, err := f.checkProc()
	if err != nil {
		return nil, err
	}
	devs, err := devices(points)
	if err != nil || len(devs) == 0 {
		return nil, err // nothing mounted: nothing to stop or unmount
	}
	s := &scan{Fencer: f, self: self, devs: devs, reported: map[int]string{}}
	s.match = s.holds
	if err := s.stopWriters(ctx); err != nil {
		return s.stopped, err
	}
	for _, p := range points {
		if p == keep {
			continue
		}
		removed, err := s.unmount(ctx, p)
		if err != nil {
			return s.stopped, err
		}
		if removed {
			// A container the kubelet restarts there must find nothing
			// it can write (an empty directory on the node's disk would
			// do): an empty read-only placeholder the unpublish removes.
			if err := unix.Mount(ports.FencedMountSource, p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555"); err != nil && !errors.Is(err, unix.ENOENT) {
				return s.stopped, fmt.Errorf("fence: cover %s: %w", p, err)
			}
		}
	}
	// Last, the processes of every mount namespace that still shows a
	// fenced filesystem at a pod's path (a container's private copy of
	// its pod's mount survives the unmount here): holding nothing right
	// now, they could still open files through it.
	own, err := os.Readlink(filepath.Join(f.opts.Proc, strconv.Itoa(self), "ns", "mnt"))
	if err != nil {
		return s.stopped, fmt.Errorf("fence: own mount namespace: %w", err)
	}
	// The host's mount namespace is pid 1's; where it cannot be read (a
	// sandbox hiding pid 1), the points alone keep the node's tree out.
	host, _ := os.Readlink(filepath.Join(f.opts.Proc, "1", "ns", "mnt"))
	s.match = s.foreign(own, host, keep, points)
	if err := s.stopWriters(ctx); err != nil {
		return s.stopped, err
	}
	return s.stopped, nil
}

// StopHolders stops (SIGSTOP) every process holding the filesystems
// mounted at points, scanning again until a scan finds none that is not
// stopped yet, and changes no mount; see ports.HolderStopper. Points are
// checked as by Fence.
func (f *Fencer) StopHolders(ctx context.Context, points []string) ([]ports.StoppedProcess, error) {
	for _, p := range points {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	self, err := f.checkProc()
	if err != nil {
		return nil, err
	}
	devs, err := devices(points)
	if err != nil || len(devs) == 0 {
		return nil, err // nothing mounted: nothing to stop
	}
	s := &scan{Fencer: f, self: self, devs: devs, reported: map[int]string{}, signal: unix.SIGSTOP}
	s.match = func(pid int) bool { return !s.halted(pid) && s.holds(pid) }
	err = s.stopWriters(ctx)
	return s.stopped, err
}

// foreign returns the predicate of a process whose mount namespace (not
// own, not the host's: the kubelet's and the node's own processes are
// stopped only when they hold the filesystem) shows a fenced filesystem
// mounted at a path that is neither keep, nor a view of the host's tree
// ending in keep (a pod that mounts the host's / sees the dataset at
// /host<keep>: it is no writer of the volume's pod), nor one of points
// (a namespace that shares the host's tree, a node's kubelet's, where an
// unmount here has not reached yet): a container's own copy of its pod's
// mount. Each namespace's mount table is read once.
func (s *scan) foreign(own, host, keep string, points []string) func(pid int) bool {
	known := make(map[string]bool, len(points))
	for _, p := range points {
		known[p] = true
	}
	seen := map[string]bool{}
	return func(pid int) bool {
		dir := filepath.Join(s.opts.Proc, strconv.Itoa(pid))
		ns, err := os.Readlink(filepath.Join(dir, "ns", "mnt"))
		if err != nil || ns == own || (host != "" && ns == host) {
			return false
		}
		if v, ok := seen[ns]; ok {
			return v
		}
		b, err := os.ReadFile(filepath.Join(dir, "mountinfo"))
		if err != nil {
			return false
		}
		v := s.showsElsewhere(b, keep, known)
		seen[ns] = v
		return v
	}
}

// showsElsewhere reads a mountinfo table: does a fenced filesystem appear
// at a mount point other than keep (or a path ending in keep) and the
// points known?
func (s *scan) showsElsewhere(mountinfo []byte, keep string, known map[string]bool) bool {
	for _, line := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		maj, min, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil || !s.devs[unix.Mkdev(uint32(ma), uint32(mi))] {
			continue
		}
		if mp := unescapeOctal(f[4]); mp != keep && !known[mp] && (keep == "" || !strings.HasSuffix(mp, keep)) {
			return true
		}
	}
	return false
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

// checkPath refuses a point that is not an absolute, clean path: the
// kernel spells mount points so, and nothing else is fenced.
func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.Contains(p, "..") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("fence: %q is not an absolute, clean path: %w", p, ports.ErrInvalid)
	}
	return nil
}

// checkProc makes sure the proc filesystem read is that of the fencer's
// pid namespace (its "self" is this process), so that a pid read there
// names the process a signal reaches. It returns this process's pid.
func (f *Fencer) checkProc() (int, error) {
	self := os.Getpid()
	l, err := os.Readlink(filepath.Join(f.opts.Proc, "self"))
	if err != nil {
		return 0, fmt.Errorf("fence: read %s/self: %w", f.opts.Proc, err)
	}
	if l != strconv.Itoa(self) {
		return 0, fmt.Errorf("fence: %s belongs to another pid namespace (self is %s, this process %d): refusing to signal its pids", f.opts.Proc, l, self)
	}
	return self, nil
}

// devices returns the device numbers of the filesystems mounted at
// points, skipping the points that are absent or not mount points.
func devices(points []string) (map[uint64]bool, error) {
	root, err := statDev("/", unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return nil, fmt.Errorf("fence: stat /: %w", err)
	}
	devs := map[uint64]bool{}
	for _, p := range points {
		var st unix.Statx_t
		err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, 0, &st)
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			continue
		case err != nil:
			return nil, fmt.Errorf("fence: stat %s: %w", p, err)
		case st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0:
			return nil, fmt.Errorf("fence: the kernel does not tell whether %s is a mount point (Linux 5.8 or later is needed)", p)
		case st.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0:
			continue // not mounted (any more)
		case placeholder(p):
			continue // an earlier fence's: the volume's mount is gone there
		}
		dev := unix.Mkdev(st.Dev_major, st.Dev_minor)
		if dev == root {
			return nil, fmt.Errorf("fence: %s is on the root filesystem: %w", p, ports.ErrInvalid)
		}
		devs[dev] = true
	}
	return devs, nil
}

// placeholder reports whether the topmost mount at p is a fence's
// placeholder (a tmpfs named ports.FencedMountSource), read from this
// process's mount table: no request reaches a FUSE daemon, which a hung
// zfs-fuse would never answer.
func placeholder(p string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	top := false
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 || unescapeOctal(f[4]) != p {
			continue
		}
		top = g[0] == "tmpfs" && g[1] == ports.FencedMountSource // later lines are mounted on top
	}
	return top
}

// statDev returns the device number of the filesystem path lies on,
// following a last symlink (or a /proc magic link) unless flags say not
// to. AT_STATX_DONT_SYNC and an empty mask spare a network or FUSE
// filesystem the round trip (a hung FUSE daemon would hang the scan);
// the device number never needs one.
func statDev(path string, flags int) (uint64, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, flags|unix.AT_STATX_DONT_SYNC, 0, &st); err != nil {
		return 0, err
	}
	return unix.Mkdev(st.Dev_major, st.Dev_minor), nil
}

// scan is one Fence call's state.
type scan struct {
	*Fencer
	self     int
	devs     map[uint64]bool
	match    func(pid int) bool // what a round kills: s.holds, then s.foreign
	stopped  []ports.StoppedProcess
	reported map[int]string // pid → command, each reported once
	// signal is what a round sends: SIGKILL (the zero value), or SIGSTOP
	// (StopHolders), after which a round waits for the processes to be
	// stopped instead of gone.
	signal unix.Signal
	round  []int // the pids signalled in the current round
}

// stopWriters kills every writer, scanning again until a scan finds
// none, at most Rounds times.
func (s *scan) stopWriters(ctx context.Context) error {
	for round := 0; round < s.opts.Rounds; round++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		s.round = s.round[:0]
		killed, err := s.killRound()
		if err != nil || len(killed) == 0 {
			return err
		}
		if s.signal == unix.SIGSTOP {
			err = s.waitHalted(ctx)
		} else {
			err = s.waitExited(ctx, killed)
		}
		for _, fd := range killed {
			unix.Close(fd)
		}
		if err != nil {
			return err
		}
	}
	return fmt.Errorf("fence: processes still hold the volume after %d rounds: %w", s.opts.Rounds, ports.ErrBusy)
}

// killRound scans every process once and kills the writers, returning a
// pidfd of each process killed.
func (s *scan) killRound() ([]int, error) {
	dir, err := os.Open(s.opts.Proc)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil, fmt.Errorf("fence: read %s: %w", s.opts.Proc, err)
	}
	var killed []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 || pid == s.self {
			continue
		}
		if !s.match(pid) {
			continue
		}
		fd, err := s.kill(pid)
		if err != nil {
			for _, fd := range killed {
				unix.Close(fd)
			}
			return nil, err
		}
		if fd >= 0 {
			killed = append(killed, fd)
		}
	}
	return killed, nil
}

// kill pins pid with a pidfd, checks again that the pinned process is a
// writer (the pid may have been reused since the scan), and kills it. It
// returns the pidfd, or -1 when the process is gone or no writer.
func (s *scan) kill(pid int) (int, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("fence: pidfd_open %d: %w", pid, err)
	}
	if !s.match(pid) {
		unix.Close(fd)
		return -1, nil
	}
	comm := s.comm(pid)
	sig := s.signal
	if sig == 0 {
		sig = unix.SIGKILL
	}
	switch err := unix.PidfdSendSignal(fd, sig, nil, 0); {
	case errors.Is(err, unix.ESRCH):
		unix.Close(fd)
		return -1, nil // exited meanwhile
	case err != nil:
		unix.Close(fd)
		return -1, fmt.Errorf("fence: kill %d (%s): %w", pid, comm, err)
	}
	s.round = append(s.round, pid)
	if c, ok := s.reported[pid]; !ok || c != comm {
		s.reported[pid] = comm
		s.stopped = append(s.stopped, ports.StoppedProcess{PID: pid, Command: comm})
	}
	return fd, nil
}

// waitExited waits until every process of pidfds has exited (up to
// Wait): a pidfd turns readable once its process is a zombie, after the
// kernel has closed its files and dropped its mappings, working
// directory and root.
func (s *scan) waitExited(ctx context.Context, pidfds []int) error {
	deadline := time.Now().Add(s.opts.Wait)
	fds := make([]unix.PollFd, len(pidfds))
	for i, fd := range pidfds {
		fds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	for len(fds) > 0 && time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		n, err := unix.Poll(fds, 100)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fence: poll pidfds: %w", err)
		}
		if n == 0 {
			continue
		}
		live := fds[:0]
		for _, p := range fds {
			if p.Revents == 0 {
				live = append(live, p)
			}
		}
		fds = live
	}
	return nil // the next scan finds what still holds the filesystem
}

// halted reports whether pid is stopped (by a signal or a tracer), as
// /proc/PID/stat's state says; a process gone is not.
func (s *scan) halted(pid int) bool {
	b, err := os.ReadFile(filepath.Join(s.opts.Proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st == 'T' || st == 't'
}

// waitHalted waits until every process signalled this round is stopped
// or gone (up to Wait); the next scan finds one that is neither.
func (s *scan) waitHalted(ctx context.Context) error {
	deadline := time.Now().Add(s.opts.Wait)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fence: %w", err)
		}
		running := false
		for _, pid := range s.round {
			if _, err := os.Stat(filepath.Join(s.opts.Proc, strconv.Itoa(pid))); err == nil && !s.halted(pid) {
				running = true
				break
			}
		}
		if !running {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// holds reports whether pid's working directory, root, executable, a
// descriptor or a file mapping lies on one of the fenced filesystems. A
// process that vanishes meanwhile holds nothing.
//
// Threads share a process's descriptors and mappings except after
// unshare(CLONE_FILES), which this does not see; their working directory
// and root are checked one by one, as unshare(CLONE_FS) separates those,
// and when the thread group leader has exited (its descriptor table is
// gone, the other threads run on) the descriptors are read through a
// live thread.
func (s *scan) holds(pid int) bool {
	dir := filepath.Join(s.opts.Proc, strconv.Itoa(pid))
	for _, l := range []string{"cwd", "root", "exe"} {
		if s.on(filepath.Join(dir, l)) {
			return true
		}
	}
	found, fds := s.anyOn(filepath.Join(dir, "fd"))
	if found {
		return true
	}
	if found, _ := s.anyOn(filepath.Join(dir, "map_files")); found {
		return true
	}
	tasks, err := readNames(filepath.Join(dir, "task"))
	if err != nil || len(tasks) < 2 {
		return false
	}
	for _, tid := range tasks {
		if tid == strconv.Itoa(pid) {
			continue
		}
		t := filepath.Join(dir, "task", tid)
		if s.on(filepath.Join(t, "cwd")) || s.on(filepath.Join(t, "root")) {
			return true
		}
		if fds == 0 {
			if found, n := s.anyOn(filepath.Join(t, "fd")); found {
				return true
			} else if n > 0 {
				fds = n // that thread's table is the process's
			}
		}
	}
	return false
}

// on reports whether the file the link at p leads to lies on a fenced
// filesystem.
func (s *scan) on(p string) bool {
	dev, err := statDev(p, 0)
	return err == nil && s.devs[dev]
}

// anyOn reports whether any link in dir leads to a fenced filesystem,
// and how many links dir holds.
func (s *scan) anyOn(dir string) (bool, int) {
	names, err := readNames(dir)
	if err != nil {
		return false, 0
	}
	for _, n := range names {
		if s.on(filepath.Join(dir, n)) {
			return true, len(names)
		}
	}
	return false, len(names)
}

func readNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

func (s *scan) comm(pid int) string {
	b, _ := os.ReadFile(filepath.Join(s.opts.Proc, strconv.Itoa(pid), "comm"))
	return strings.TrimSuffix(string(b), "\n")
}

// unmount removes every mount of a fenced filesystem stacked at p. EBUSY
// means something took hold of it again: its writers are stopped and the
// unmount tried again, at most BusyRetries times.
func (s *scan) unmount(ctx context.Context, p string) (bool, error) {
	busy := 0
	removed := false
	for stacked := 0; stacked < 100; stacked++ {
		var st unix.Statx_t
		err := unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, 0, &st)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return removed, nil
		}
		if err != nil {
			return removed, fmt.Errorf("fence: stat %s: %w", p, err)
		}
		if st.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 || !s.devs[unix.Mkdev(st.Dev_major, st.Dev_minor)] {
			return removed, nil // not a mount point, or another filesystem's
		}
		switch err := unix.Unmount(p, unix.UMOUNT_NOFOLLOW); {
		case err == nil:
			// Again: the same filesystem may be mounted below.
			removed = true
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return removed, nil
		case errors.Is(err, unix.EBUSY):
			if busy >= s.opts.BusyRetries {
				return removed, fmt.Errorf("fence: unmount %s: %v: %w", p, err, ports.ErrBusy)
			}
			busy++
			if err := s.stopWriters(ctx); err != nil {
				return removed, err
			}
			select {
			case <-ctx.Done():
				return removed, fmt.Errorf("fence: %w", ctx.Err())
			case <-time.After(time.Duration(busy) * 100 * time.Millisecond):
			}
		default:
			return removed, fmt.Errorf("fence: unmount %s: %w", p, err)
		}
	}
	return removed, fmt.Errorf("fence: %s is still mounted after 100 unmounts", p)
}
