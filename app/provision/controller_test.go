package provision_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

var (
	ctx = context.Background()
	cfg = provision.Config{Node: "node-1", Pool: "ferry"}
	rw  = []volume.Capability{{Mode: volume.SingleNodeWriter}}
	vol = ports.VolumeInfo{ID: "v", MountPath: "/ferry/ferry/v", MountSource: "ferry/ferry/v", CapacityBytes: volume.GiB}
)

func newController(t *testing.T) (*provision.Service, *mocks.MockSnapshotStore) {
	c, store, _ := newControllerWithMounts(t)
	return c, store
}

// newControllerWithMounts also returns the mount table the controller
// reads (DeleteVolume); a call a test did not expect fails it.
func newControllerWithMounts(t *testing.T) (*provision.Service, *mocks.MockSnapshotStore, *mocks.MockMountTable) {
	ctrl := gomock.NewController(t)
	store, mounts := mocks.NewMockSnapshotStore(ctrl), mocks.NewMockMountTable(ctrl)
	return provision.New(cfg, store, mounts, zap.NewNop()), store, mounts
}

func notFound(id string) error { return fmt.Errorf("volume %s: %w", id, ports.ErrNotFound) }

func TestCreateVolumeCreatesTheDatasetWithRoundedSizeAllowedPropertiesAndMetadata(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("pvc-1")).Return(ports.VolumeInfo{}, notFound("pvc-1"))
	store.EXPECT().CreateVolume(gomock.Any(), volume.ID("pvc-1"), gomock.Any()).DoAndReturn(
		func(_ context.Context, id volume.ID, o ports.CreateOptions) (ports.VolumeInfo, error) {
			if o.CapacityBytes != 2*volume.MiB {
				t.Errorf("capacity %d, want 2 MiB (rounded up)", o.CapacityBytes)
			}
			if o.Properties["recordsize"] != "131072" || o.Properties["compression"] != "lz4" || len(o.Properties) != 2 {
				t.Errorf("properties %v", o.Properties)
			}
			m := o.Metadata
			if m[ports.MetaName] != "pvc-1" || m[ports.MetaReplicationFactor] != "2" || m[ports.MetaParams] == "" || m[ports.MetaPVC] != "db/data" {
				t.Errorf("metadata %v", m)
			}
			return ports.VolumeInfo{ID: id, CapacityBytes: o.CapacityBytes, Metadata: m}, nil
		})
	v, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{
		Name: "pvc-1", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB + 1}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "2", "compression": "lz4", "recordsize": "128k",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != "pvc-1" || v.CapacityBytes != 2*volume.MiB || v.Node != "node-1" || v.Context[provision.ContextReplicationFactor] != "2" || v.Context[provision.ContextPool] != "ferry" {
		t.Fatalf("volume %+v", v)
	}
}

func TestCreateVolumeRefusesBadRequestsWithoutTouchingTheStore(t *testing.T) {
	cases := map[string]provision.CreateVolumeRequest{
		"path traversal":      {Name: "../../etc", Capabilities: rw},
		"dataset separator":   {Name: "a/b", Capabilities: rw},
		"snapshot separator":  {Name: "a@b", Capabilities: rw},
		"shell":               {Name: "$(reboot)", Capabilities: rw},
		"10 KB name":          {Name: strings.Repeat("n", 10<<10), Capabilities: rw},
		"unknown parameter":   {Name: "ok", Capabilities: rw, Parameters: map[string]string{"fancy": "1"}},
		"disallowed property": {Name: "ok", Capabilities: rw, Parameters: map[string]string{"mountpoint": "/"}},
		"foreign pool":        {Name: "ok", Capabilities: rw, Parameters: map[string]string{"pool": "tank"}},
		"no capability":       {Name: "ok"},
		"block":               {Name: "ok", Capabilities: []volume.Capability{{Block: true, Mode: volume.SingleNodeWriter}}},
		"multi-node":          {Name: "ok", Capabilities: []volume.Capability{{Mode: volume.MultiNodeMultiWriter}}},
		"inverted range":      {Name: "ok", Capabilities: rw, Capacity: volume.CapacityRange{RequiredBytes: 2 << 30, LimitBytes: 1 << 30}},
		"two sources":         {Name: "ok", Capabilities: rw, SourceSnapshotID: "a@b", SourceVolumeID: "c"},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			c, _ := newController(t) // no expectations: any store call fails the test
			_, err := c.CreateVolume(ctx, req)
			var inv *volume.InvalidError
			if !errors.As(err, &inv) && !errors.Is(err, refusal.ErrUnsupported) {
				t.Fatalf("err = %v, want an InvalidError or ErrUnsupported", err)
			}
		})
	}
}

func TestCreateVolumeRetriedReturnsTheSameVolumeAndAConflictingOneIsRefused(t *testing.T) {
	req := provision.CreateVolumeRequest{Name: "pvc-1", Capacity: volume.CapacityRange{RequiredBytes: volume.GiB}, Capabilities: rw}
	var made ports.CreateOptions
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), gomock.Any()).Return(ports.VolumeInfo{}, notFound("pvc-1"))
	store.EXPECT().CreateVolume(gomock.Any(), gomock.Any(), gomock.Any()).DoAndReturn(
		func(_ context.Context, id volume.ID, o ports.CreateOptions) (ports.VolumeInfo, error) {
			made = o
			return ports.VolumeInfo{ID: id, CapacityBytes: o.CapacityBytes, Metadata: o.Metadata}, nil
		})
	first, err := c.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	existing := ports.VolumeInfo{ID: "pvc-1", CapacityBytes: made.CapacityBytes, Metadata: made.Metadata}
	store.EXPECT().GetVolume(gomock.Any(), gomock.Any()).Return(existing, nil).Times(3)
	again, err := c.CreateVolume(ctx, req)
	if err != nil || again.ID != first.ID || again.CapacityBytes != first.CapacityBytes {
		t.Fatalf("retry = %+v, %v; want %+v", again, err, first)
	}
	bigger := req
	bigger.Capacity.RequiredBytes = 2 * volume.GiB
	if _, err := c.CreateVolume(ctx, bigger); !errors.Is(err, refusal.ErrIncompatible) {
		t.Fatalf("larger size: %v, want ErrIncompatible", err)
	}
	otherParams := req
	otherParams.Parameters = map[string]string{"defaultReplicationFactor": "3"}
	if _, err := c.CreateVolume(ctx, otherParams); !errors.Is(err, refusal.ErrIncompatible) {
		t.Fatalf("other parameters: %v, want ErrIncompatible", err)
	}
}

func TestCreateVolumeNeverAdoptsADatasetFerryDidNotCreate(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), gomock.Any()).Return(ports.VolumeInfo{}, fmt.Errorf("x: %w", ports.ErrNotOwned))
	_, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "pvc-1", Capabilities: rw})
	if !errors.Is(err, refusal.ErrPrecondition) {
		t.Fatalf("err = %v, want ErrPrecondition", err)
	}
}

func TestACopyThatFailsHalfwayIsDestroyed(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("new")).Return(ports.VolumeInfo{}, notFound("new"))
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("src")).Return([]ports.SnapshotInfo{{Volume: "src", Name: "csi-s1", SizeBytes: 10}}, nil)
	store.EXPECT().Send(gomock.Any(), ports.SendRequest{Volume: "src", To: "csi-s1"}).Return(io.NopCloser(strings.NewReader("stream")), nil)
	store.EXPECT().Receive(gomock.Any(), volume.ID("new"), gomock.Any()).Return(nil)
	store.EXPECT().DestroySnapshot(gomock.Any(), volume.ID("new"), "csi-s1").Return(nil)
	store.EXPECT().Resize(gomock.Any(), volume.ID("new"), volume.GiB).Return(fmt.Errorf("pool: %w", ports.ErrNoSpace))
	store.EXPECT().DestroyVolume(gomock.Any(), volume.ID("new")).Return(nil)
	_, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "new", Capabilities: rw, SourceSnapshotID: "src@s1"})
	if !errors.Is(err, ports.ErrNoSpace) {
		t.Fatalf("err = %v, want ErrNoSpace", err)
	}
}

func TestDeleteVolumeKeepsAVolumeWithCSISnapshotsButNotForReplicationSnapshots(t *testing.T) {
	c, store, mounts := newControllerWithMounts(t)
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("v")).Return([]ports.SnapshotInfo{{Volume: "v", Name: "ferry-1-3"}, {Volume: "v", Name: "csi-keep"}}, nil)
	if err := c.DeleteVolume(ctx, "v"); !errors.Is(err, refusal.ErrPrecondition) {
		t.Fatalf("err = %v, want ErrPrecondition", err)
	}
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("v")).Return([]ports.SnapshotInfo{{Volume: "v", Name: "ferry-1-3"}}, nil)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	mounts.EXPECT().MountsOf("ferry/ferry/v").Return([]string{"/ferry/ferry/v"}, nil) // its own mountpoint only
	store.EXPECT().DestroyVolume(gomock.Any(), volume.ID("v")).Return(nil)
	if err := c.DeleteVolume(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("gone")).Return(nil, notFound("gone"))
	if err := c.DeleteVolume(ctx, "gone"); err != nil {
		t.Fatalf("deleting a deleted volume: %v", err)
	}
	if err := c.DeleteVolume(ctx, "../etc"); err != nil {
		t.Fatalf("an ID no volume can have is already deleted: %v", err)
	}
}

func TestDeleteVolumeRefusesAVolumeMountedForAPodAndDestroysNothing(t *testing.T) {
	c, store, mounts := newControllerWithMounts(t)
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("v")).Return(nil, nil)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	mounts.EXPECT().MountsOf("ferry/ferry/v").Return([]string{"/ferry/ferry/v", "/var/lib/kubelet/pods/p/mount"}, nil)
	// No DestroyVolume expected: gomock fails the test if it is called.
	err := c.DeleteVolume(ctx, "v")
	if !errors.Is(err, refusal.ErrPrecondition) || !strings.Contains(err.Error(), "/var/lib/kubelet/pods/p/mount") {
		t.Fatalf("err = %v, want ErrPrecondition naming the pod's mount", err)
	}
}

func TestExpandVolumeIsIdempotent(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{ID: "v", CapacityBytes: volume.GiB}, nil)
	store.EXPECT().Resize(gomock.Any(), volume.ID("v"), 2*volume.GiB).Return(nil)
	if n, err := c.ExpandVolume(ctx, "v", volume.CapacityRange{RequiredBytes: 2 * volume.GiB}); err != nil || n != 2*volume.GiB {
		t.Fatalf("expand = %d, %v", n, err)
	}
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{ID: "v", CapacityBytes: 2 * volume.GiB}, nil)
	if n, err := c.ExpandVolume(ctx, "v", volume.CapacityRange{RequiredBytes: 2 * volume.GiB}); err != nil || n != 2*volume.GiB {
		t.Fatalf("second expand = %d, %v (no Resize expected)", n, err)
	}
}

// An encrypted volume is closed at the end of its creation (unmounted,
// its key unloaded: the publish that needs it loads the key again); a
// plaintext one is not touched (the test above: any other call fails it).
func TestCreateVolumeClosesAnEncryptedVolumeAtTheEnd(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("pvc-1")).Return(ports.VolumeInfo{}, notFound("pvc-1"))
	created := store.EXPECT().CreateVolume(gomock.Any(), volume.ID("pvc-1"), gomock.Any()).DoAndReturn(
		func(_ context.Context, id volume.ID, o ports.CreateOptions) (ports.VolumeInfo, error) {
			if !o.Encryption.On() || o.Key.Empty() {
				t.Errorf("created with encryption %+v, a key: %v", o.Encryption, !o.Key.Empty())
			}
			return ports.VolumeInfo{ID: id, CapacityBytes: o.CapacityBytes, Metadata: o.Metadata}, nil
		})
	store.EXPECT().UnloadKey(gomock.Any(), volume.ID("pvc-1")).After(created).Return(nil)
	_, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{
		Name: "pvc-1", Capabilities: rw, Parameters: map[string]string{"encryption": "on"},
		Secrets: map[string]string{"key": "correct horse battery"},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// encryptingPool is a pool that can encrypt.
type encryptingPool struct{ ports.NoPoolFeatures }

func (encryptingPool) CanEncrypt() bool { return true }

// A node whose pool cannot encrypt offers no capacity to an encrypted
// StorageClass (the scheduler must not place one there); one that can
// offers its pool's, and a plaintext class is answered as before.
func TestCapacityOfAnEncryptedClassIsZeroWhereThePoolCannotEncrypt(t *testing.T) {
	enc := map[string]string{"encryption": "on"}
	c, store := newController(t) // any call to the store fails the test
	if n, err := c.Capacity(ctx, enc); err != nil || n != 0 {
		t.Fatalf("a pool that cannot encrypt: %d, %v; want 0", n, err)
	}
	store.EXPECT().Capacity(gomock.Any()).Return(ports.PoolCapacity{AvailableBytes: 5 * volume.GiB}, nil)
	if n, err := c.Capacity(ctx, nil); err != nil || n != 5*volume.GiB {
		t.Fatalf("a plaintext class: %d, %v", n, err)
	}
	ctrl := gomock.NewController(t)
	m := mocks.NewMockSnapshotStore(ctrl)
	m.EXPECT().Capacity(gomock.Any()).Return(ports.PoolCapacity{AvailableBytes: 3 * volume.GiB}, nil)
	can := provision.New(cfg, m, mocks.NewMockMountTable(ctrl), zap.NewNop(), provision.WithPoolFeatures(encryptingPool{}))
	if n, err := can.Capacity(ctx, enc); err != nil || n != 3*volume.GiB {
		t.Fatalf("a pool that can encrypt: %d, %v", n, err)
	}
}

// What a failed receive kept to be resumed is dropped: a retry streams
// again from the start, and nothing is left in the pool meanwhile.
func TestACopyWhoseReceiveFailsDiscardsThePartialReceive(t *testing.T) {
	c, store := newController(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("new")).Return(ports.VolumeInfo{}, notFound("new"))
	store.EXPECT().ListSnapshots(gomock.Any(), volume.ID("src")).Return([]ports.SnapshotInfo{{Volume: "src", Name: "csi-s1", SizeBytes: 10}}, nil)
	store.EXPECT().Send(gomock.Any(), ports.SendRequest{Volume: "src", To: "csi-s1"}).Return(io.NopCloser(strings.NewReader("stream")), nil)
	store.EXPECT().Receive(gomock.Any(), volume.ID("new"), gomock.Any()).Return(errors.New("zfs recv: stream cut"))
	store.EXPECT().DiscardPartial(gomock.Any(), volume.ID("new")).Return(nil)
	if _, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "new", Capabilities: rw, SourceSnapshotID: "src@s1"}); err == nil {
		t.Fatal("a failed receive made a volume")
	}
}
