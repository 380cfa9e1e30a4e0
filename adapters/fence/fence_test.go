//go:build linux

package fence

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// testOpts bound a fence that cannot stop its writers to about half a
// minute, so that such a failure ends in the test's cleanups (which kill
// its children and destroy its pool) rather than in a test timeout.
var testOpts = Options{Rounds: 10, Wait: 3 * time.Second}

// needRoot fails a test that mounts and kills when not run as root: no
// tool is missing then, and skipping would hide the fence untested.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("fence tests mount filesystems and kill their own children: they need root (CI runs as root)")
	}
}

// child is a process the test started; it is killed and reaped when the
// test ends, whatever happened.
type child struct {
	pid  int
	cmd  *exec.Cmd
	done chan struct{} // closed once reaped
}

func start(t *testing.T, argv ...string) *child {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-c.done })
	return c
}

// appender starts a shell that opens file through fd 3 and keeps
// appending a line to it every 50 ms.
func appender(t *testing.T, file string) *child {
	return start(t, "sh", "-c", `exec 3>>"$1" || exit 1; while :; do echo x >&3; sleep 0.05; done`, "sh", file)
}

// sitter starts a process whose only hold on dir is its working
// directory.
func sitter(t *testing.T, dir string) *child {
	return start(t, "sh", "-c", `cd "$1" && exec sleep 1000`, "sh", dir)
}

func (c *child) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// killed waits until c was reaped and checks it died of SIGKILL.
func (c *child) killed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) still runs after the fence", what, c.pid)
	}
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("%s (pid %d) ended with %v, not by SIGKILL", what, c.pid, c.cmd.ProcessState)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func size(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func grows(t *testing.T, p string, by int64) func() bool {
	from := size(t, p)
	return func() bool { st, err := os.Stat(p); return err == nil && st.Size() >= from+by }
}

func cwdIs(pid int, dir string) func() bool {
	return func() bool {
		l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
		return err == nil && l == dir
	}
}

// mountSource is the source of the topmost mount at p ("" if none), from
// the kernel's table.
func mountSource(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	src := ""
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		if f, g := strings.Fields(pre), strings.Fields(post); ok && len(f) > 4 && f[4] == p && len(g) > 1 {
			src = g[1]
		}
	}
	return src
}

// isMount reports whether p is a mount point in the test's mount
// namespace, read from the kernel's table rather than as the fencer
// tells.
func isMount(t *testing.T, p string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == p {
			return true
		}
	}
	return false
}

func bind(t *testing.T, source, target string) {
	t.Helper()
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s at %s: %v", source, target, err)
	}
	t.Cleanup(func() {
		for unix.Unmount(target, unix.MNT_DETACH) == nil { // the fence's placeholder too
		}
	})
}

func tmpfs(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("ferryfence", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

func pids(stopped []ports.StoppedProcess) map[int]string {
	m := map[int]string{}
	for _, p := range stopped {
		m[p.PID] = p.Command
	}
	return m
}

// A pod's writers on zfs-fuse, where neither readonly=on nor a forced
// unmount stops them (ENVIRONMENT.md, "Fencing a writer on zfs-fuse"): one
// appends through a descriptor it opened through the pod's bind mount and
// keeps open across the fence, one has only its working directory in the
// bind mount. The fence kills both, removes the bind mount, keeps the
// dataset's own mount, and leaves a writer on another filesystem alone.
func TestFenceStopsTheWritersOfAZFSVolumeAndRemovesThePodsMount(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir() // before the pool: removed after it is destroyed
	pool := zfstest.NewPool(t, "ferryfence", "128M")
	ds := pool.Name + "/vol"
	zfstest.ZFS(t, "create", ds)
	mnt := strings.TrimSpace(zfstest.ZFS(t, "get", "-H", "-o", "value", "mountpoint", ds))
	if !isMount(t, mnt) {
		t.Fatalf("%s is not mounted at %s", ds, mnt)
	}
	// The pods' directory is a shared mount, as the kubelet's is: an
	// unmount there reaches the namespaces that are its slaves.
	// Private first: where the temporary directory's own mount is shared
	// (the OpenZFS guest's /tmp), a bind of it joins that mount's peer
	// group, and every mount made below pods would also appear below tmp
	// itself, a path no kubelet has.
	pods := filepath.Join(tmp, "pods")
	bind(t, tmp, pods)
	if err := unix.Mount("", pods, "", unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", pods, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(pods, "pod", "mount")
	bind(t, mnt, target)
	var dsSt, targetSt unix.Stat_t
	if err := unix.Stat(mnt, &dsSt); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(target, &targetSt); err != nil {
		t.Fatal(err)
	}
	if dsSt.Dev != targetSt.Dev {
		t.Fatalf("the bind mount's st_dev %#x differs from the dataset's %#x", targetSt.Dev, dsSt.Dev)
	}

	writer := appender(t, filepath.Join(target, "held"))
	idle := sitter(t, target)
	// A container: a mount namespace of its own with a private copy of the
	// pod's mount, opening the file anew for every write (it holds
	// nothing between writes).
	// Its copy lies at a path of its own (a container sees it at its
	// mount path in its root, not at the pod's target).
	inside := filepath.Join(tmp, "container-data")
	if err := os.MkdirAll(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	container := start(t, "unshare", "-m", "--propagation", "private", "sh", "-c", `mount --bind "$1" "$2" && umount "$1" && while :; do echo x >> "$2/ns"; sleep 0.05; done`, "sh", target, inside)
	// A namespace with a private copy of the node's tree (as a kubelet
	// started in a namespace of its own has): the unmount does not reach
	// it, so it still shows the dataset at the pod's target, but it holds
	// nothing there: it is not stopped (it may be the node's kubelet).
	nodeView := start(t, "unshare", "-m", "--propagation", "private", "sleep", "1000")
	// A namespace that receives the host's unmounts (a pod viewing the
	// host's tree): once the pod's mount is gone it shows the dataset at
	// its own mountpoint only, and is no writer.
	hostView := start(t, "unshare", "-m", "--propagation", "slave", "sleep", "1000")
	bystanderFile := filepath.Join(tmp, "bystander")
	bystander := appender(t, bystanderFile)
	waitFor(t, "the writer writes", func() bool { _, err := os.Stat(filepath.Join(mnt, "held")); return err == nil })
	waitFor(t, "the writer writes through the bind mount", grows(t, filepath.Join(mnt, "held"), 4))
	waitFor(t, "the idle process sits in the bind mount", cwdIs(idle.pid, target))
	waitFor(t, "the container writes", func() bool { _, err := os.Stat(filepath.Join(mnt, "ns")); return err == nil })
	waitFor(t, "the bystander writes", func() bool { _, err := os.Stat(bystanderFile); return err == nil })

	stopped, err := New(testOpts).Fence(context.Background(), []string{mnt, target}, mnt)
	if err != nil {
		t.Fatalf("%v (stopped %+v)", err, stopped)
	}
	t.Logf("stopped %+v", stopped)
	writer.killed(t, "the writer holding its descriptor")
	idle.killed(t, "the process sitting in the mount")
	container.killed(t, "the writer in a mount namespace of its own")
	if !hostView.alive() {
		t.Errorf("a namespace that sees the dataset only at its own mountpoint was stopped (pid %d: %v)", hostView.pid, hostView.cmd.ProcessState)
	}
	if !nodeView.alive() {
		t.Errorf("a namespace that sees the dataset only where the fence was given it (the node's tree) and holds nothing was stopped (pid %d: %v)", nodeView.pid, nodeView.cmd.ProcessState)
	}
	got := pids(stopped)
	if got[writer.pid] != "sh" || got[idle.pid] != "sleep" {
		t.Errorf("stopped %+v; want among them %d (sh) and %d (sleep)", stopped, writer.pid, idle.pid)
	}
	if _, ok := got[bystander.pid]; ok || !bystander.alive() {
		t.Errorf("the bystander on another filesystem was stopped: %+v", stopped)
	}
	for pid := range got {
		if pid <= 1 || pid == os.Getpid() {
			t.Errorf("stopped pid %d", pid)
		}
	}
	if src := mountSource(t, target); src != ports.FencedMountSource {
		t.Errorf("the pod's target %s shows %q, want the fence's read-only placeholder %q", target, src, ports.FencedMountSource)
	}
	if err := os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644); err == nil {
		t.Error("a file was written at the fenced target")
	}
	if !isMount(t, mnt) {
		t.Errorf("the dataset's own mount %s is gone", mnt)
	}

	// Nothing writes the volume any more: while the bystander, which
	// writes at the same pace, appends ten more lines, the files the
	// writers wrote stay as they were.
	before, beforeNS := size(t, filepath.Join(mnt, "held")), size(t, filepath.Join(mnt, "ns"))
	waitFor(t, "the bystander appends ten lines", grows(t, bystanderFile, 20))
	if after, afterNS := size(t, filepath.Join(mnt, "held")), size(t, filepath.Join(mnt, "ns")); after != before || afterNS != beforeNS {
		t.Fatalf("the volume's files grew from %d, %d to %d, %d bytes after the fence", before, beforeNS, after, afterNS)
	}

	again, err := New(testOpts).Fence(context.Background(), []string{mnt, target}, mnt)
	if err != nil || len(again) != 0 {
		t.Fatalf("fencing again: stopped %+v, %v; want nothing, no error", again, err)
	}
	if !isMount(t, mnt) || !bystander.alive() {
		t.Fatal("fencing again unmounted the dataset or stopped the bystander")
	}
}

// Without ZFS: a tmpfs and a bind mount of it. Only the processes on it
// are stopped, a directory that is no mount point (and so lies on another
// filesystem) fences nothing, and a second fence stops nothing and
// succeeds.
func TestFenceStopsOnlyTheVolumesProcessesAndIsIdempotent(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	vol, target, plain := filepath.Join(tmp, "vol"), filepath.Join(tmp, "target"), filepath.Join(tmp, "plain")
	tmpfs(t, vol)
	bind(t, vol, target)
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	holder := appender(t, filepath.Join(target, "f"))
	mapper := start(t, "sh", "-c", `cp /bin/sleep "$1/sleep" && exec "$1/sleep" 1000`, "sh", target)
	bystander := appender(t, filepath.Join(plain, "f"))
	idleBystander := sitter(t, plain)
	waitFor(t, "the holder writes", func() bool { _, err := os.Stat(filepath.Join(vol, "f")); return err == nil })
	waitFor(t, "the bystander writes", func() bool { _, err := os.Stat(filepath.Join(plain, "f")); return err == nil })
	waitFor(t, "the idle bystander sits", cwdIs(idleBystander.pid, plain))
	waitFor(t, "the program runs from the volume", func() bool {
		l, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(mapper.pid), "exe"))
		return err == nil && l == filepath.Join(target, "sleep")
	})

	f := New(testOpts)
	// plain is a directory, not a mount point: fencing it must not take
	// its filesystem (the one of t.TempDir) for a volume.
	if stopped, err := f.Fence(context.Background(), []string{plain, filepath.Join(tmp, "absent")}, ""); err != nil || len(stopped) != 0 {
		t.Fatalf("fencing a plain directory and an absent one: stopped %+v, %v", stopped, err)
	}

	stopped, err := f.Fence(context.Background(), []string{vol, target}, vol)
	if err != nil {
		t.Fatal(err)
	}
	holder.killed(t, "the holder")
	mapper.killed(t, "the program run from the volume")
	got := pids(stopped)
	if _, ok := got[holder.pid]; !ok {
		t.Errorf("stopped %+v, want the holder %d among them", stopped, holder.pid)
	}
	if _, ok := got[mapper.pid]; !ok {
		t.Errorf("stopped %+v, want the program %d among them", stopped, mapper.pid)
	}
	for _, b := range []*child{bystander, idleBystander} {
		if _, ok := got[b.pid]; ok || !b.alive() {
			t.Errorf("bystander %d was stopped: %+v", b.pid, stopped)
		}
	}
	if mountSource(t, target) != ports.FencedMountSource || !isMount(t, vol) {
		t.Errorf("after the fence: target shows %q (want the placeholder), volume mounted %v (want true)", mountSource(t, target), isMount(t, vol))
	}

	for i := 0; i < 2; i++ {
		again, err := f.Fence(context.Background(), []string{vol, target}, vol)
		if err != nil || len(again) != 0 {
			t.Fatalf("fencing again: stopped %+v, %v; want nothing, no error", again, err)
		}
	}
	if !isMount(t, vol) || !bystander.alive() || !idleBystander.alive() {
		t.Fatal("fencing again unmounted the volume or stopped a bystander")
	}
}

// Points are the kernel's absolute, clean paths: anything else is
// refused before anything is stopped or unmounted.
func TestFenceRefusesPathsThatAreNotAbsoluteAndClean(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	vol := filepath.Join(tmp, "vol")
	tmpfs(t, vol)
	holder := sitter(t, vol)
	waitFor(t, "the holder sits in the volume", cwdIs(holder.pid, vol))

	f := New(testOpts)
	for _, c := range []struct {
		points []string
		keep   string
	}{
		{[]string{vol, "relative/path"}, vol},
		{[]string{vol, vol + "/../vol"}, vol},
		{[]string{vol, vol + "/.."}, vol},
		{[]string{vol + "/./"}, ""},
		{[]string{vol + "/"}, ""},
		{[]string{"//" + vol}, ""},
		{[]string{vol, ""}, ""},
		{[]string{vol}, "keep"},
		{[]string{vol}, vol + "/.."},
		{[]string{vol + "\x00"}, ""},
	} {
		stopped, err := f.Fence(context.Background(), c.points, c.keep)
		if !errors.Is(err, ports.ErrInvalid) || len(stopped) != 0 {
			t.Errorf("Fence(%q, %q) = %+v, %v; want nothing stopped, ErrInvalid", c.points, c.keep, stopped, err)
		}
	}
	if !holder.alive() || !isMount(t, vol) {
		t.Fatalf("a refused fence stopped the holder (alive %v) or unmounted the volume (mounted %v)", holder.alive(), isMount(t, vol))
	}
}

// The root filesystem is never a volume, and a proc filesystem of another
// pid namespace is never read for pids to signal. Both are tried against
// a fake proc holding no process, so that a failing guard still kills
// nothing.
func TestFenceRefusesTheRootFilesystemAndAForeignProc(t *testing.T) {
	needRoot(t)
	fake := t.TempDir()
	if err := os.Symlink(strconv.Itoa(os.Getpid()), filepath.Join(fake, "self")); err != nil {
		t.Fatal(err)
	}
	stopped, err := New(Options{Proc: fake, Rounds: 1, Wait: time.Second}).Fence(context.Background(), []string{"/"}, "/")
	if !errors.Is(err, ports.ErrInvalid) || len(stopped) != 0 {
		t.Errorf("fencing /: %+v, %v; want ErrInvalid", stopped, err)
	}

	foreign := t.TempDir()
	if err := os.Symlink("1", filepath.Join(foreign, "self")); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(t.TempDir(), "vol")
	tmpfs(t, vol)
	holder := sitter(t, vol)
	waitFor(t, "the holder sits in the volume", cwdIs(holder.pid, vol))
	stopped, err = New(Options{Proc: foreign}).Fence(context.Background(), []string{vol}, "")
	if err == nil || len(stopped) != 0 || !holder.alive() || !isMount(t, vol) {
		t.Errorf("fencing with a foreign proc: %+v, %v (holder alive %v, volume mounted %v); want an error and nothing done", stopped, err, holder.alive(), isMount(t, vol))
	}
}

// One scan of every process on the node, none of which holds the volume:
// the fence's cost when nothing is left to stop.
func BenchmarkFenceScansTheNode(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root to mount a tmpfs")
	}
	vol := filepath.Join(b.TempDir(), "vol")
	if err := os.Mkdir(vol, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mount("ferryfence", vol, "tmpfs", 0, "size=1m"); err != nil {
		b.Fatal(err)
	}
	defer unix.Unmount(vol, unix.MNT_DETACH)
	f := New(Options{})
	for b.Loop() {
		if stopped, err := f.Fence(context.Background(), []string{vol}, vol); err != nil || len(stopped) != 0 {
			b.Fatal(stopped, err)
		}
	}
}

// stoppedState reports whether pid is stopped (SIGSTOP).
func stoppedState(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// StopHolders stops (SIGSTOP, not SIGKILL: a container killed is
// restarted, and on zfs-fuse could append again) the processes holding
// the volume, through a pod's bind mount too (it shares the volume's
// device), and nobody else, and leaves every mount as it was: the
// watchdog's part of a fence. Again, it finds nothing new. The daemon's
// fence then kills a stopped holder.
func TestStopHoldersStopsTheVolumesHoldersAndChangesNoMount(t *testing.T) {
	needRoot(t)
	tmp := t.TempDir()
	vol, target, plain := filepath.Join(tmp, "vol"), filepath.Join(tmp, "target"), filepath.Join(tmp, "plain")
	tmpfs(t, vol)
	bind(t, vol, target)
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	holder := appender(t, filepath.Join(target, "f"))
	bystander := appender(t, filepath.Join(plain, "f"))
	waitFor(t, "the holder writes", func() bool { _, err := os.Stat(filepath.Join(vol, "f")); return err == nil })
	waitFor(t, "the bystander writes", func() bool { _, err := os.Stat(filepath.Join(plain, "f")); return err == nil })

	f := New(testOpts)
	stopped, err := f.StopHolders(context.Background(), []string{vol})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pids(stopped)[holder.pid]; !ok {
		t.Errorf("stopped %+v, want the holder %d among them", stopped, holder.pid)
	}
	if !stoppedState(holder.pid) || !holder.alive() {
		t.Fatalf("the holder %d is not stopped (alive %v)", holder.pid, holder.alive())
	}
	if !bystander.alive() || stoppedState(bystander.pid) {
		t.Error("the bystander was stopped")
	}
	if !isMount(t, vol) || !isMount(t, target) || mountSource(t, target) == ports.FencedMountSource {
		t.Errorf("a mount changed: volume mounted %v, target mounted %v with source %q", isMount(t, vol), isMount(t, target), mountSource(t, target))
	}
	if again, err := f.StopHolders(context.Background(), []string{vol, target}); err != nil || len(again) != 0 {
		t.Fatalf("again: stopped %+v, %v; want nothing", again, err)
	}
	if _, err := f.StopHolders(context.Background(), []string{"relative"}); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a relative point: %v, want ErrInvalid", err)
	}
	// The daemon's fence kills what the watchdog stopped.
	if _, err := f.Fence(context.Background(), []string{vol, target}, vol); err != nil {
		t.Fatal(err)
	}
	holder.killed(t, "the stopped holder")
}
