//go:build linux

package zfs_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// mountedAt reports whether something is mounted at dir (this process's
// mount table).
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// Publish on the node that is already the primary (a Deployment's rolling
// update puts the new pod where the volume is usable: the primary's node
// alone) remounts the dataset (publish.Service.acquire -> SnapshotStore.Remount)
// while the old pod's bind mount is in place. The port says Remount
// answers ErrBusy then. The ZFS adapter instead unmounts every mount whose
// source is the dataset (unmountLeftover), the pod's bind mount included:
// the kubelet's target is no longer mounted on the host, so the node
// plugin stops seeing that pod use the volume (MountsOf), and the next
// unpublish of another target releases the primary while the old pod,
// through its container's own copy of the mount, still writes.
func TestRemountLeavesAPodsBindMountOfTheDatasetAlone(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-review-remount", "256M")
	s := newStore(t, pool)
	ctx := context.Background()
	if _, err := s.CreateVolume(ctx, "v", ports.CreateOptions{CapacityBytes: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	info, err := s.GetVolume(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	// The old pod's target, bind-mounted as the Mounter does.
	target := filepath.Join(t.TempDir(), "pods", "old", "mount")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(info.MountPath, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount (this test runs as root, as CI does): %v", err)
	}
	t.Cleanup(func() {
		for mountedAt(t, target) {
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", target, err)
				return
			}
		}
		_ = s.DestroyVolume(context.Background(), "v")
	})
	if err := os.WriteFile(filepath.Join(target, "data"), []byte("the old pod's write"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = s.Remount(ctx, "v")
	if !mountedAt(t, target) {
		t.Fatalf("Remount answered %v and unmounted the pod's bind mount at %s (the port says: ErrBusy while a pod's bind mount uses it)", err, target)
	}
	if err != nil && !errors.Is(err, ports.ErrBusy) {
		t.Fatalf("Remount with a pod's bind mount in place: %v, want nil or ErrBusy", err)
	}
}
