//go:build linux

package mount_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// requireRoot fails without root: bind mounts need it, and CI runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("bind-mount tests need root")
	}
}

// layout is a kubelet directory with a pod directory, a source to mount
// and a directory outside the kubelet directory that must never be touched.
type layout struct {
	kubelet, pod, source, outside string
}

func newLayout(t *testing.T) layout {
	t.Helper()
	requireRoot(t)
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l := layout{
		kubelet: filepath.Join(base, "kubelet"),
		pod:     filepath.Join(base, "kubelet", "pods", "uid"),
		source:  filepath.Join(base, "source"),
		outside: filepath.Join(base, "outside"),
	}
	for _, d := range []string{l.pod, l.source, l.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.source, "volume-file"), []byte("v"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { detachBelow(t, base) })
	return l
}

// detachBelow lazily unmounts whatever a failed test left mounted below dir.
func detachBelow(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	points := mountPoints(data)
	for i := len(points) - 1; i >= 0; i-- {
		if p := points[i]; p == dir || strings.HasPrefix(p, dir+"/") {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
}

func mountPoints(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			out = append(out, f[4])
		}
	}
	return out
}

func target(t *testing.T, l layout, name string) volume.Target {
	t.Helper()
	tg, err := volume.ParseTarget("target_path", filepath.Join(l.pod, name), l.kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// A symlink swapped in after the target was checked is not followed: the
// mount lands on the directory that was checked (held by its descriptor),
// never on the symlink's destination.
func TestBindMountUsesTheCheckedDirectoryEvenIfASymlinkIsSwappedIn(t *testing.T) {
	l := newLayout(t)
	tg := target(t, l, "mount")
	moved := filepath.Join(l.pod, "moved-away")
	m := mount.WithBeforeMount(mount.Linux{}, func() {
		if err := os.Rename(tg.Path(), moved); err != nil {
			t.Errorf("swap: %v", err)
		}
		if err := os.Symlink(l.outside, tg.Path()); err != nil {
			t.Errorf("swap: %v", err)
		}
	})
	if err := m.BindMount(context.Background(), l.source, tg, false); err != nil {
		t.Fatalf("BindMount: %v", err)
	}
	if _, ok, _ := m.MountAt(l.outside); ok {
		t.Fatalf("the symlink's destination %s was mounted over", l.outside)
	}
	if _, err := os.Stat(filepath.Join(l.outside, "volume-file")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the volume's files appear at the symlink's destination (%v)", err)
	}
	if _, ok, _ := m.MountAt(moved); !ok {
		t.Fatalf("the checked directory (now %s) holds no mount", moved)
	}
	if err := unix.Unmount(moved, 0); err != nil {
		t.Fatal(err)
	}
}

func TestBindMountCreatesOnlyTheLastComponentAndNeverFollowsASymlink(t *testing.T) {
	l := newLayout(t)
	if err := os.Symlink(l.outside, filepath.Join(l.pod, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(l.outside, filepath.Join(l.kubelet, "pods", "linked-pod")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.pod, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m := mount.Linux{}
	for _, c := range []struct{ what, path string }{
		{"a last component that is a symlink", filepath.Join(l.pod, "link")},
		{"a parent that is a symlink", filepath.Join(l.kubelet, "pods", "linked-pod", "mount")},
		{"a missing parent", filepath.Join(l.pod, "missing", "mount")},
		{"a last component that is a file", filepath.Join(l.pod, "file")},
	} {
		t.Run(c.what, func(t *testing.T) {
			tg, err := volume.ParseTarget("target_path", c.path, l.kubelet)
			if err != nil {
				t.Fatal(err)
			}
			err = m.BindMount(context.Background(), l.source, tg, false)
			if !errors.Is(err, ports.ErrInvalid) {
				t.Fatalf("BindMount(%s) = %v, want ErrInvalid", c.path, err)
			}
			for _, p := range []string{c.path, l.outside, filepath.Join(l.outside, "mount")} {
				if _, ok, _ := m.MountAt(p); ok {
					t.Fatalf("%s was mounted", p)
				}
			}
			if ents, _ := os.ReadDir(l.outside); len(ents) != 0 {
				t.Fatalf("the outside directory gained %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(l.pod, "missing")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a missing parent was created (%v)", err)
			}
		})
	}
}

func TestAReadOnlyBindIsReadOnlyAndUnmountThenRemoveDirLeaveNothing(t *testing.T) {
	l := newLayout(t)
	tg := target(t, l, "mount")
	m := mount.Linux{}
	if err := m.BindMount(context.Background(), l.source, tg, true); err != nil {
		t.Fatal(err)
	}
	if mt, ok, _ := m.MountAt(tg.Path()); !ok || !mt.ReadOnly {
		t.Fatalf("MountAt = %+v, %v; want a read-only mount", mt, ok)
	}
	if err := os.WriteFile(filepath.Join(tg.Path(), "x"), nil, 0o644); err == nil {
		t.Fatal("wrote into a read-only bind")
	}
	if err := m.Unmount(context.Background(), tg); err != nil {
		t.Fatal(err)
	}
	if removed, err := m.RemoveDir(tg); err != nil || !removed {
		t.Fatalf("RemoveDir = %v, %v; want removed", removed, err)
	}
	if _, err := os.Lstat(tg.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(l.source, "volume-file")); err != nil {
		t.Fatalf("the source lost its file: %v", err)
	}
}
