package csi_test

import (
	"testing"
	"time"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/domain/volume"
)

// An operation on a volume while another holds its lock is refused at once
// with ABORTED, so the CO retries; other volumes are not held up.
func TestAConcurrentOperationOnTheSameVolumeIsAborted(t *testing.T) {
	blocker, wrap := newBlockingStore("vol-1")
	e := newEnv(t, wrap)
	e.mustCreate(t, createReq("src", 0))

	type result struct {
		v   *spec.Volume
		err error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := e.ctrl.CreateVolume(ctx(t), createReq("vol-1", volume.GiB))
		first <- result{resp.GetVolume(), err}
	}()
	select {
	case <-blocker.entered:
	case r := <-first:
		t.Fatalf("the first CreateVolume returned before reaching the store: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the first CreateVolume never reached the store")
	}

	cases := []struct {
		what string
		call func() error
	}{
		{"the same CreateVolume", func() error { _, err := e.ctrl.CreateVolume(ctx(t), createReq("vol-1", volume.GiB)); return err }},
		{"a CreateVolume of the same name, other size", func() error { _, err := e.ctrl.CreateVolume(ctx(t), createReq("vol-1", 2*volume.GiB)); return err }},
		{"a DeleteVolume", func() error {
			_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
			return err
		}},
		{"a ControllerExpandVolume", func() error {
			_, err := e.ctrl.ControllerExpandVolume(ctx(t), &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: 2 * volume.GiB}})
			return err
		}},
		{"a CreateSnapshot of it", func() error {
			_, err := e.ctrl.CreateSnapshot(ctx(t), &spec.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: "vol-1"})
			return err
		}},
		{"a DeleteSnapshot of one of its snapshots", func() error {
			_, err := e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: "vol-1@snap-1"})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) { wantCode(t, c.call(), codes.Aborted) })
	}
	t.Run("an operation on another volume proceeds", func(t *testing.T) {
		e.mustCreate(t, createReq("vol-2", 0))
		_, err := e.ctrl.ControllerExpandVolume(ctx(t), &spec.ControllerExpandVolumeRequest{VolumeId: "src", CapacityRange: &spec.CapacityRange{RequiredBytes: 2 * volume.GiB}})
		wantCode(t, err, codes.OK)
	})

	close(blocker.released)
	r := <-first
	wantCode(t, r.err, codes.OK)
	// The lock is released: the retry the CO makes now succeeds.
	again := e.mustCreate(t, createReq("vol-1", volume.GiB))
	if again.GetVolumeId() != r.v.GetVolumeId() || again.GetCapacityBytes() != r.v.GetCapacityBytes() {
		t.Fatalf("the retry = %v, want %v", again, r.v)
	}
	if _, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"}); err != nil {
		t.Fatalf("DeleteVolume after the lock was released: %v", err)
	}
}

// A clone holds its source's lock for the copy: the source cannot be
// deleted or expanded under it, and the clone is refused while the source
// is busy.
func TestACloneIsAbortedWhileItsSourceIsBusy(t *testing.T) {
	blocker, wrap := newBlockingStore("src")
	e := newEnv(t, wrap)
	done := make(chan error, 1)
	go func() { _, err := e.ctrl.CreateVolume(ctx(t), createReq("src", 0)); done <- err }()
	select {
	case <-blocker.entered:
	case err := <-done:
		t.Fatalf("CreateVolume returned before reaching the store: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("CreateVolume never reached the store")
	}
	req := createReq("clone", 0)
	req.VolumeContentSource = fromVolume("src")
	_, err := e.ctrl.CreateVolume(ctx(t), req)
	wantCode(t, err, codes.Aborted)
	close(blocker.released)
	wantCode(t, <-done, codes.OK)
	e.mustCreate(t, req)
}

func TestAConcurrentPublishOfTheSameVolumeIsAborted(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	entered, release := make(chan struct{}), make(chan struct{})
	e.mount.setOnBind(func() { close(entered); <-release })
	done := make(chan error, 1)
	go func() { _, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false)); done <- err }()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("NodePublishVolume returned before mounting: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("NodePublishVolume never mounted")
	}
	_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false))
	wantCode(t, err, codes.Aborted)
	_, err = e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
	wantCode(t, err, codes.Aborted)
	close(release)
	wantCode(t, <-done, codes.OK)
	e.mount.setOnBind(nil)
	_, err = e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false))
	wantCode(t, err, codes.OK)
}
