// Command demo is `make demo`: on a fresh machine it makes a file-backed
// ZFS pool, starts `ferry controller` and `ferry daemon` on it, and then, as
// a CSI client (the role kubelet and the external-provisioner play in a
// cluster), walks one volume through its life: provision, publish, write
// and read, snapshot, restore, expand, unpublish, delete. It prints each
// step and leaves nothing behind: processes, pool, files.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/tests/zfstest"
)

func main() {
	ferry := flag.String("ferry", "bin/ferry", "the ferry binary")
	zfsUp := flag.String("zfs-up", "tests/scripts/zfs-up.sh", "script that starts zfs-fuse if needed")
	dir := flag.String("dir", "/var/tmp/ferry-demo", "working directory (removed at the end)")
	pool := flag.String("pool", "ferry-demo", "name of the file-backed pool to create (destroyed at the end)")
	flag.Parse()
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
	d := &demo{ferry: *ferry, dir: abs, pool: *pool}
	err = d.run(*zfsUp)
	if cerr := d.teardown(); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ndemo complete: every step passed and nothing is left behind")
}

type demo struct {
	ferry, dir, pool string
	procs            []*exec.Cmd
	pool0            *zfstest.Pool
	step             int
	ctrl             csi.ControllerClient
	node             csi.NodeClient
	id               csi.IdentityClient
}

func (d *demo) say(format string, args ...any) {
	d.step++
	fmt.Printf("%2d. %s\n", d.step, fmt.Sprintf(format, args...))
}

func (d *demo) detail(format string, args ...any) {
	fmt.Printf("    %s\n", fmt.Sprintf(format, args...))
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *demo) run(zfsUp string) error {
	d.say("starting ZFS (zfs-fuse here; OpenZFS works the same)")
	if err := run(zfsUp); err != nil {
		return err
	}
	if err := run("zpool", "list", d.pool); err == nil {
		return fmt.Errorf("a pool named %s already exists: remove it or pass -pool", d.pool)
	}
	_ = os.RemoveAll(d.dir)
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	d.say("making a 2 GiB file-backed pool %s (a sparse file: it uses no disk until written)", d.pool)
	p, err := zfstest.CreatePool(d.pool, "2G")
	if err != nil {
		return err
	}
	d.pool0 = p
	d.detail("backing file %s", p.File)
	if err := d.startDriver(); err != nil {
		return err
	}
	return d.lifecycle()
}

func (d *demo) startDriver() error {
	d.say("starting the driver: `ferry controller` and `ferry daemon`, each on its own CSI socket")
	common := []string{"--pool", d.pool, "--parent-dataset", "ferry", "--node-id", "demo-node", "--log-format", "console"}
	for _, mode := range []string{"controller", "daemon"} {
		sock := filepath.Join(d.dir, mode+".sock")
		logf, err := os.Create(filepath.Join(d.dir, mode+".log"))
		if err != nil {
			return err
		}
		args := append([]string{mode, "--csi-endpoint", "unix://" + sock}, common...)
		if mode == "daemon" {
			// The demo's directory plays the kubelet's: targets lie below it.
			args = append(args, "--kubelet-dir", d.dir)
		}
		cmd := exec.Command(d.ferry, args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start ferry %s: %w", mode, err)
		}
		d.procs = append(d.procs, cmd)
		d.detail("ferry %s (pid %d) on %s, log %s", mode, cmd.Process.Pid, sock, logf.Name())
	}
	conn := func(mode string) (*grpc.ClientConn, error) {
		sock := filepath.Join(d.dir, mode+".sock")
		for i := 0; i < 100; i++ {
			if _, err := os.Stat(sock); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	cc, err := conn("controller")
	if err != nil {
		return err
	}
	nc, err := conn("daemon")
	if err != nil {
		return err
	}
	d.ctrl, d.node, d.id = csi.NewControllerClient(cc), csi.NewNodeClient(nc), csi.NewIdentityClient(cc)
	return nil
}

var mountRW = &csi.VolumeCapability{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:8]) }

func (d *demo) lifecycle() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := d.id.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		return fmt.Errorf("GetPluginInfo: %w", err)
	}
	d.say("GetPluginInfo: %s %s", info.GetName(), info.GetVendorVersion())

	params := map[string]string{"defaultReplicationFactor": "1", "compression": "on", "atime": "off"}
	vol, err := d.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "demo-volume", CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountRW}, Parameters: params,
	})
	if err != nil {
		return fmt.Errorf("CreateVolume: %w", err)
	}
	v := vol.GetVolume()
	d.say("CreateVolume demo-volume: id %s, %d MiB, context %v, topology %v", v.GetVolumeId(), v.GetCapacityBytes()>>20, v.GetVolumeContext(), v.GetAccessibleTopology()[0].GetSegments())
	d.detail("dataset %s/ferry/%s with refquota, refreservation and Ferry's user properties", d.pool, v.GetVolumeId())

	target := filepath.Join(d.dir, "pods", "app", "volume")
	// The kubelet makes the pod's directory; the driver only the last
	// component of the target, never following a symlink.
	for _, pod := range []string{"app", "restore"} {
		if err := os.MkdirAll(filepath.Join(d.dir, "pods", pod), 0o750); err != nil {
			return err
		}
	}
	hostile := filepath.Join(d.dir, "pods") + "/../../../etc/ferry-demo"
	_, err = d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: hostile, VolumeCapability: mountRW})
	if status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("NodePublishVolume at %s = %v, want InvalidArgument", hostile, err)
	}
	if _, err := os.Stat("/etc/ferry-demo"); !os.IsNotExist(err) {
		return fmt.Errorf("a refused publish left /etc/ferry-demo behind (%v)", err)
	}
	d.say("NodePublishVolume at %s is refused (InvalidArgument): nothing created, nothing mounted", hostile)
	if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target, VolumeCapability: mountRW}); err != nil {
		return fmt.Errorf("NodePublishVolume: %w", err)
	}
	d.say("NodePublishVolume: bind-mounted at %s", target)

	data := []byte("hello from a pod, written at " + time.Now().UTC().Format(time.RFC3339) + "\n")
	file := filepath.Join(target, "hello.txt")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	back, err := os.ReadFile(file)
	if err != nil || string(back) != string(data) {
		return fmt.Errorf("read back %q, %v; wrote %q", back, err, data)
	}
	d.say("wrote and read back %s (%d bytes, sha256 %s)", file, len(data), sum(data))

	_, err = d.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
	if status.Code(err) != codes.FailedPrecondition {
		return fmt.Errorf("DeleteVolume of a published volume = %v, want FailedPrecondition", err)
	}
	if back, err := os.ReadFile(file); err != nil || string(back) != string(data) {
		return fmt.Errorf("after a refused delete, %s = %q, %v; want %q", file, back, err, data)
	}
	d.say("DeleteVolume while the volume is published is refused (FailedPrecondition): the pod's data is intact")

	snap, err := d.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "demo-snapshot", SourceVolumeId: v.GetVolumeId()})
	if err != nil {
		return fmt.Errorf("CreateSnapshot: %w", err)
	}
	d.say("CreateSnapshot demo-snapshot: id %s, ready %v", snap.GetSnapshot().GetSnapshotId(), snap.GetSnapshot().GetReadyToUse())

	if err := os.WriteFile(file, []byte("oops, overwritten\n"), 0o644); err != nil {
		return err
	}
	d.say("overwrote hello.txt after the snapshot (the mistake a restore undoes)")

	restored, err := d.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: "demo-restored", CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{mountRW}, Parameters: params,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}},
	})
	if err != nil {
		return fmt.Errorf("CreateVolume from snapshot: %w", err)
	}
	rv := restored.GetVolume()
	rtarget := filepath.Join(d.dir, "pods", "restore", "volume")
	if _, err := d.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: rv.GetVolumeId(), TargetPath: rtarget, VolumeCapability: mountRW, Readonly: true}); err != nil {
		return fmt.Errorf("NodePublishVolume restored: %w", err)
	}
	got, err := os.ReadFile(filepath.Join(rtarget, "hello.txt"))
	if err != nil || string(got) != string(data) {
		return fmt.Errorf("restored hello.txt = %q, %v; want %q", got, err, data)
	}
	d.say("restored the snapshot into volume %s, published read-only at %s: hello.txt is back (sha256 %s)", rv.GetVolumeId(), rtarget, sum(got))
	if err := os.WriteFile(filepath.Join(rtarget, "x"), []byte("x"), 0o644); err == nil {
		return errors.New("a read-only publish accepted a write")
	}
	d.detail("a write there is refused: the publish is read-only")

	exp, err := d.ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}})
	if err != nil {
		return fmt.Errorf("ControllerExpandVolume: %w", err)
	}
	if _, err := d.node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.GetVolumeId(), VolumePath: target}); err != nil {
		return fmt.Errorf("NodeExpandVolume: %w", err)
	}
	stats, err := d.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.GetVolumeId(), VolumePath: target})
	if err != nil {
		return fmt.Errorf("NodeGetVolumeStats: %w", err)
	}
	u := stats.GetUsage()[0]
	d.say("ControllerExpandVolume to %d MiB (node expansion needed: %v); the pod now sees %d MiB total, %d KiB used",
		exp.GetCapacityBytes()>>20, exp.GetNodeExpansionRequired(), u.GetTotal()>>20, u.GetUsed()>>10)

	for _, p := range []struct{ id, target string }{{v.GetVolumeId(), target}, {rv.GetVolumeId(), rtarget}} {
		if _, err := d.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: p.id, TargetPath: p.target}); err != nil {
			return fmt.Errorf("NodeUnpublishVolume %s: %w", p.id, err)
		}
		if _, err := os.Stat(p.target); !os.IsNotExist(err) {
			return fmt.Errorf("target %s still exists after unpublish", p.target)
		}
	}
	d.say("NodeUnpublishVolume both: targets unmounted and removed")

	if _, err := d.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err == nil {
		return errors.New("DeleteVolume of a volume with a snapshot succeeded: the snapshot would be lost")
	}
	d.say("DeleteVolume demo-volume while it has a snapshot is refused (FailedPrecondition): deleting it would delete the snapshot")
	for _, step := range []func() error{
		func() error {
			_, err := d.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: rv.GetVolumeId()})
			return err
		},
		func() error {
			_, err := d.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()})
			return err
		},
		func() error {
			_, err := d.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()})
			return err
		},
	} {
		if err := step(); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	d.say("DeleteVolume demo-restored, DeleteSnapshot demo-snapshot, DeleteVolume demo-volume")

	vols, err := d.ctrl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	if err != nil {
		return err
	}
	snaps, err := d.ctrl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil {
		return err
	}
	if len(vols.GetEntries())+len(snaps.GetEntries()) != 0 {
		return fmt.Errorf("left behind: %d volumes, %d snapshots", len(vols.GetEntries()), len(snaps.GetEntries()))
	}
	d.say("ListVolumes and ListSnapshots are empty")
	return nil
}

// teardown stops the driver, destroys the pool and removes the directory,
// then checks that nothing is left.
func (d *demo) teardown() error {
	var errs []error
	for _, p := range d.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range d.procs {
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("ferry (pid %d) did not stop cleanly on SIGTERM: %v", p.Process.Pid, err))
			}
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			errs = append(errs, fmt.Errorf("ferry (pid %d) ignored SIGTERM for 20s", p.Process.Pid))
		}
	}
	if d.pool0 != nil {
		if err := d.pool0.Destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(d.dir); err != nil {
		errs = append(errs, err)
	}
	if d.pool0 != nil {
		d.say("stopped the driver (SIGTERM), destroyed pool %s, removed %s", d.pool, d.dir)
		if err := run("zpool", "list", d.pool); err == nil {
			errs = append(errs, fmt.Errorf("pool %s still exists", d.pool))
		}
	}
	return errors.Join(errs...)
}
