package csi_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/adapters/mount"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// zfsEnv is the driver on a real ZFS pool (zfs-fuse here) with the real
// Linux mounter, served over real gRPC: what `ferry controller` and
// `ferry daemon` run, in one process.
type zfsEnv struct {
	base    string // holds kubelet and outside
	pool    *zfstest.Pool
	store   *zfs.Store
	kubelet string // the kubelet directory (--kubelet-dir)
	pods    string // kubelet/pods: the parent of every pod directory
	outside string // a directory outside kubelet, never to be touched
	ctrl    spec.ControllerClient
	node    spec.NodeClient
}

func newZFSEnv(t *testing.T) *zfsEnv {
	t.Helper()
	pool := zfstest.NewPool(t, "ferry-csinode", "512M")
	store, err := zfs.New(zfs.Config{Pool: pool.Name, Parent: "ferry", Driver: driverName})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &zfsEnv{
		base: base, pool: pool, store: store,
		kubelet: filepath.Join(base, "kubelet"),
		pods:    filepath.Join(base, "kubelet", "pods"),
		outside: filepath.Join(base, "outside"),
	}
	for _, d := range []string{e.pods, e.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(e.outside, "precious"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Runs before the pool is destroyed (cleanups run last-in first-out):
	// a failed test must not leave a bind mount holding the pool busy.
	t.Cleanup(func() { detachBelow(base) })
	cfg := publish.Config{Node: nodeName, KubeletDir: e.kubelet}
	log := zap.NewNop()
	mounter := mount.Linux{}
	id := &csi.Identity{Name: driverName, Version: driverVersion, Ready: func(context.Context) error { return nil }}
	conn := serve(t, csi.NewServer(log, id,
		&csi.Controller{UC: provision.New(provision.Config{Node: nodeName, Pool: pool.Name}, store, mounter.Table, log, provision.WithPoolFeatures(store))},
		&csi.Node{UC: publish.New(cfg, store, mounter, log)}))
	e.ctrl, e.node = spec.NewControllerClient(conn), spec.NewNodeClient(conn)
	return e
}

// mountPoints lists every mount point of this process's mount table.
func mountPoints(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			out = append(out, f[4])
		}
	}
	sort.Strings(out)
	return out
}

// mountsHere lists the mount points this test may change or must not:
// those below its directories and /etc. Other packages' tests mount and
// unmount concurrently elsewhere (their pools, their binds).
func (e *zfsEnv) mountsHere(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, m := range mountPoints(t) {
		if strings.HasPrefix(m, e.base+"/") || m == "/etc" || strings.HasPrefix(m, "/etc/") {
			out = append(out, m)
		}
	}
	return out
}

func isMountPoint(t *testing.T, p string) bool {
	t.Helper()
	for _, m := range mountPoints(t) {
		if m == p {
			return true
		}
	}
	return false
}

func detachBelow(dir string) {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if f := strings.Fields(lines[i]); len(f) >= 5 && strings.HasPrefix(f[4], dir+"/") {
			_ = unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}

// tree lists every path below dir with its type, without following
// symlinks: what a refused call must leave exactly as it was.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out = append(out, p+" "+fi.Mode().Type().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *zfsEnv) datasetExists(t *testing.T, volumeID string) bool {
	t.Helper()
	err := exec.Command("zfs", "list", "-H", "-o", "name", e.pool.Name+"/ferry/"+volumeID).Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return err == nil
}

func (e *zfsEnv) publish(t *testing.T, volumeID, target string) {
	t.Helper()
	_, err := e.node.NodePublishVolume(ctx(t), &spec.NodePublishVolumeRequest{VolumeId: volumeID, TargetPath: target, VolumeCapability: rwCap()})
	wantCode(t, err, codes.OK)
}

func (e *zfsEnv) unpublish(t *testing.T, volumeID, target string) error {
	t.Helper()
	_, err := e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target})
	return err
}

func TestNodePublishOnZFSRefusesHostileTargetsCreatingAndMountingNothing(t *testing.T) {
	e := newZFSEnv(t)
	v := e.mustCreate(t, createReq("vol-1", 64<<20))
	pod := filepath.Join(e.pods, "uid-1")
	if err := os.Mkdir(pod, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ link, to string }{
		{filepath.Join(e.pods, "to-etc"), "/etc"},
		{filepath.Join(e.pods, "to-outside"), e.outside},
		{filepath.Join(pod, "last-to-outside"), e.outside},
	} {
		if err := os.Symlink(l.to, l.link); err != nil {
			t.Fatal(err)
		}
	}
	// A name of this run's own in /etc: should the rule break, the test
	// fails on it and removes it, and no other run is affected.
	etcName := filepath.Join("/etc", e.pool.Name)
	t.Cleanup(func() {
		_ = unix.Unmount(etcName, unix.MNT_DETACH)
		_ = os.Remove(etcName)
	})
	cases := []struct{ what, target string }{
		{"a .. component", pod + "/../../../outside/mount"},
		{"a parent that is a symlink to /etc", filepath.Join(e.pods, "to-etc", e.pool.Name)},
		{"a parent that is a symlink out of the kubelet dir", filepath.Join(e.pods, "to-outside", "mount")},
		{"a last component that is a symlink", filepath.Join(pod, "last-to-outside")},
		{"a NUL byte", pod + "/mo\x00unt"},
		{"more than 4096 bytes", pod + "/" + strings.Repeat("m", 4097)},
		{"a relative path", "pods/uid-1/mount"},
		{"a path outside the kubelet dir", filepath.Join(e.outside, "mount")},
		{"a missing parent", filepath.Join(pod, "missing", "mount")},
		{"the kubelet dir itself", e.kubelet},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			mountsBefore, kubeletBefore, outsideBefore := e.mountsHere(t), tree(t, e.kubelet), tree(t, e.outside)
			_, err := e.node.NodePublishVolume(ctx(t), &spec.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: c.target, VolumeCapability: rwCap()})
			wantCode(t, err, codes.InvalidArgument)
			if after := e.mountsHere(t); strings.Join(after, "\n") != strings.Join(mountsBefore, "\n") {
				t.Fatalf("the mount table changed:\nbefore %q\nafter  %q", mountsBefore, after)
			}
			if after := tree(t, e.kubelet); strings.Join(after, "\n") != strings.Join(kubeletBefore, "\n") {
				t.Fatalf("the kubelet dir changed:\nbefore %q\nafter  %q", kubeletBefore, after)
			}
			if after := tree(t, e.outside); strings.Join(after, "\n") != strings.Join(outsideBefore, "\n") {
				t.Fatalf("the outside dir changed:\nbefore %q\nafter  %q", outsideBefore, after)
			}
			if _, err := os.Lstat(etcName); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s exists (%v)", etcName, err)
			}
			for _, p := range []string{e.outside, "/etc"} {
				if isMountPoint(t, p) {
					t.Fatalf("%s, a symlink's destination, was mounted over", p)
				}
			}
		})
	}
	// The same volume publishes fine at a good target, which proves the
	// refusals above were about the paths.
	good := filepath.Join(pod, "mount")
	e.publish(t, v.GetVolumeId(), good)
	if !isMountPoint(t, good) {
		t.Fatalf("%s is not a mount point after publishing", good)
	}
	if err := e.unpublish(t, v.GetVolumeId(), good); err != nil {
		t.Fatal(err)
	}
}

func TestDeleteVolumeOnZFSOfAPublishedVolumeIsRefusedUntilUnpublished(t *testing.T) {
	e := newZFSEnv(t)
	v := e.mustCreate(t, createReq("vol-1", 64<<20))
	pod := filepath.Join(e.pods, "uid-1")
	if err := os.Mkdir(pod, 0o750); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(pod, "mount")
	e.publish(t, v.GetVolumeId(), target)
	file := filepath.Join(target, "data")
	if err := os.WriteFile(file, []byte("a pod's data"), 0o644); err != nil {
		t.Fatal(err)
	}

	_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
	wantCode(t, err, codes.FailedPrecondition)
	if !e.datasetExists(t, v.GetVolumeId()) {
		t.Fatal("the dataset is gone after a refused delete")
	}
	if !isMountPoint(t, target) {
		t.Fatal("the pod's mount is gone after a refused delete")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "a pod's data" {
		t.Fatalf("the pod's data after a refused delete: %q, %v", b, err)
	}

	if err := e.unpublish(t, v.GetVolumeId(), target); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the target survived unpublish (%v)", err)
	}
	_, err = e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
	wantCode(t, err, codes.OK)
	if e.datasetExists(t, v.GetVolumeId()) {
		t.Fatal("the dataset survived the delete")
	}
}

func TestNodeUnpublishOnZFSRemovesOnlyWhatFerryMounted(t *testing.T) {
	e := newZFSEnv(t)
	v := e.mustCreate(t, createReq("vol-1", 64<<20))
	pod := filepath.Join(e.pods, "uid-1")
	if err := os.Mkdir(pod, 0o750); err != nil {
		t.Fatal(err)
	}

	t.Run("a non-empty directory Ferry never mounted is left with its contents", func(t *testing.T) {
		dir := filepath.Join(pod, "full")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.unpublish(t, v.GetVolumeId(), dir); err != nil {
			t.Fatalf("unpublish: %v, want OK (not mounted is unpublished)", err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(b) != "mine" {
			t.Fatalf("the directory's contents after unpublish: %q, %v", b, err)
		}
	})

	t.Run("an empty directory Ferry never mounted is removed", func(t *testing.T) {
		dir := filepath.Join(pod, "empty")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := e.unpublish(t, v.GetVolumeId(), dir); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the empty directory is still there (%v)", err)
		}
	})

	t.Run("a mount that is not the volume's is refused and left mounted", func(t *testing.T) {
		dir := filepath.Join(pod, "foreign")
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(e.outside, dir, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		err := e.unpublish(t, v.GetVolumeId(), dir)
		wantCode(t, err, codes.FailedPrecondition)
		if !isMountPoint(t, dir) {
			t.Fatal("the foreign mount was unmounted")
		}
		if b, err := os.ReadFile(filepath.Join(e.outside, "precious")); err != nil || string(b) != "outside" {
			t.Fatalf("the foreign filesystem's file: %q, %v", b, err)
		}
	})

	t.Run("an unmounted target after its volume was deleted is OK", func(t *testing.T) {
		target := filepath.Join(pod, "mount")
		e.publish(t, v.GetVolumeId(), target)
		if err := e.unpublish(t, v.GetVolumeId(), target); err != nil {
			t.Fatal(err)
		}
		_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
		wantCode(t, err, codes.OK)
		for i := 0; i < 2; i++ { // the kubelet retrying must get OK too
			if err := e.unpublish(t, v.GetVolumeId(), target); err != nil {
				t.Fatalf("unpublish after delete: %v, want OK", err)
			}
		}
	})
}

func (e *zfsEnv) mustCreate(t *testing.T, req *spec.CreateVolumeRequest) *spec.Volume {
	t.Helper()
	resp, err := e.ctrl.CreateVolume(ctx(t), req)
	if err != nil {
		t.Fatalf("CreateVolume(%q): %v", req.GetName(), err)
	}
	return resp.GetVolume()
}
