package fence_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/adapters/fence"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

var ctx = context.Background()

func size(t *testing.T, p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// start runs argv as a child of the test, reaped in the background;
// exited closes when it is gone.
func start(t *testing.T, argv ...string) (int, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd.Process.Pid, exited
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

func written(p string) func() bool {
	return func() bool { st, err := os.Stat(p); return err == nil && st.Size() > 0 }
}

func gone(t *testing.T, what string, exited <-chan struct{}) {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still runs after the fence", what)
	}
}

// mountSource is the source of the topmost mount at p ("" if none).
func mountSource(t *testing.T, p string) string {
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

func isMount(t *testing.T, p string) bool {
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

// A pod's writers on zfs-fuse, where neither readonly=on nor a forced
// unmount stops them (../shared/ENVIRONMENT.md): one appends through a
// descriptor it keeps open across the fence, one sits with its working
// directory in the pod's mount, one lives in a mount namespace of its own
// (a container's) and opens the file anew for every write. The fence
// stops all three, removes the pod's mount, keeps the dataset's own, and
// leaves a process on another filesystem alone. Fencing again stops
// nothing.
func TestAFenceStopsEveryWriterOfTheVolumeAndRemovesThePodsMount(t *testing.T) {
	pool := zfstest.NewPool(t, "ferryfence", "128M")
	ds := pool.Name + "/vol"
	zfstest.ZFS(t, "create", ds)
	mnt := strings.TrimSpace(zfstest.ZFS(t, "get", "-H", "-o", "value", "mountpoint", ds))
	target := filepath.Join(t.TempDir(), "mount")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(mnt, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for unix.Unmount(target, unix.MNT_DETACH) == nil {
		}
	})

	held, heldExited := start(t, "sh", "-c", `exec 3>>"$1/held"; while :; do echo x >&3; sleep 0.02; done`, "sh", target)
	cwd, cwdExited := start(t, "sh", "-c", `cd "$1" && exec sleep 1000`, "sh", target)
	ns, nsExited := start(t, "unshare", "-m", "--propagation", "private", "sh", "-c", `while :; do echo x >> "$1/ns"; sleep 0.02; done`, "sh", target)
	bystander, bystanderExited := start(t, "sh", "-c", `cd "$1" && exec sleep 1000`, "sh", t.TempDir())
	waitFor(t, "the writers write", func() bool { return written(filepath.Join(mnt, "held"))() && written(filepath.Join(mnt, "ns"))() })
	waitFor(t, "the idle one sits in the mount", func() bool {
		l, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(cwd), "cwd"))
		return l == target
	})

	f := fence.New()
	stopped, err := f.Fence(ctx, []string{mnt, target}, mnt)
	if err != nil {
		t.Fatal(err)
	}
	gone(t, "the writer holding its descriptor", heldExited)
	gone(t, "the process sitting in the mount", cwdExited)
	gone(t, "the writer in its own mount namespace", nsExited)
	pids := map[int]bool{}
	for _, p := range stopped {
		pids[p.PID] = true
	}
	if !pids[held] || !pids[cwd] || !pids[ns] || pids[bystander] { // their children (a sleep between writes) may be stopped too
		t.Fatalf("stopped %+v; want %d, %d and %d", stopped, held, cwd, ns)
	}
	select {
	case <-bystanderExited:
		t.Fatal("a process on another filesystem was stopped")
	default:
	}
	if src := mountSource(t, target); src != ports.FencedMountSource || !isMount(t, mnt) {
		t.Fatalf("after the fence: the pod's target shows %q (want the placeholder %q), the dataset's own mount kept: %v", src, ports.FencedMountSource, isMount(t, mnt))
	}
	if err := os.WriteFile(filepath.Join(target, "new"), []byte("x"), 0o644); err == nil {
		t.Fatal("a file was written at the fenced target")
	}
	// What the writers wrote stays; nothing writes any more.
	before := size(t, filepath.Join(mnt, "held"))
	again, err := f.Fence(ctx, []string{mnt}, mnt)
	if err != nil || len(again) != 0 {
		t.Fatalf("fencing again: %+v, %v", again, err)
	}
	if after := size(t, filepath.Join(mnt, "held")); after != before || before == 0 {
		t.Fatalf("held grew from %d to %d after the fence", before, after)
	}
}

func TestAFenceRefusesPathsThatAreNotPlainAbsolutePaths(t *testing.T) {
	f := fence.New()
	for _, c := range [][2]string{{"relative", "/k"}, {"/a/../b", "/k"}, {"/a", "k"}} {
		if _, err := f.Fence(ctx, []string{c[0]}, c[1]); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%v: %v, want ErrInvalid", c, err)
		}
	}
}
