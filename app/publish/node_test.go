package publish_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/app/volumelock"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

func newNode(t *testing.T) (*publish.Service, *mocks.MockSnapshotStore, *mocks.MockMounter) {
	ctrl := gomock.NewController(t)
	store, mnt := mocks.NewMockSnapshotStore(ctrl), mocks.NewMockMounter(ctrl)
	return publish.New(cfg, store, mnt, zap.NewNop()), store, mnt
}

var (
	ctx = context.Background()
	cfg = publish.Config{Node: "node-1"}
	vol = ports.VolumeInfo{ID: "v", MountPath: "/ferry/ferry/v", MountSource: "ferry/ferry/v", CapacityBytes: volume.GiB}
)

func notFound(id string) error { return fmt.Errorf("volume %s: %w", id, ports.ErrNotFound) }

// podTarget is a kubelet target path below the default kubelet directory.
const podTarget = "/var/lib/kubelet/pods/x/mount"

var podTargetParts = volume.Target{Root: "/var/lib/kubelet", Parent: "pods/x", Name: "mount"}

func TestPublishBindMountsReadOnlyWhenTheModeNeverWrites(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	mnt.EXPECT().BindMount(gomock.Any(), "/ferry/ferry/v", podTargetParts, true).Return(nil)
	err := n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: volume.Capability{Mode: volume.SingleNodeReaderOnly}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPublishAgainTheSameWayMountsNothingAndAnotherWayIsRefused(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(2)
	mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil).Times(2)
	req := publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: volume.Capability{Mode: volume.SingleNodeWriter}}
	if err := n.Publish(ctx, req); err != nil {
		t.Fatalf("same publish again: %v", err)
	}
	req.ReadOnly = true
	if err := n.Publish(ctx, req); !errors.Is(err, refusal.ErrIncompatible) {
		t.Fatalf("read-only over read-write: %v, want ErrIncompatible", err)
	}
}

// The mocks expect no call: a refused target must not reach the store or
// the mount table.
func TestPublishRefusesBadTargetsBeforeTouchingAnything(t *testing.T) {
	for _, target := range []string{"../../etc", "/pods/x/mount", "/var/lib/kubelet/pods/../../../etc", "/var/lib/kubelet/pods/x\x00/mount", "/var/lib/kubelet"} {
		n, _, _ := newNode(t)
		err := n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: target, Capability: volume.Capability{Mode: volume.SingleNodeWriter}})
		var inv *volume.InvalidError
		if !errors.As(err, &inv) {
			t.Fatalf("Publish at %q: err = %v, want InvalidError", target, err)
		}
	}
}

func TestUnpublishOfADeletedVolumeNotMountedSucceedsAndRemovesOnlyAnEmptyDirectory(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{}, notFound("v"))
	mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	mnt.EXPECT().RemoveDir(podTargetParts).Return(false, nil)
	if err := n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatalf("unpublish after delete: %v, want nil", err)
	}
}

func TestUnpublishLeavesAMountThatIsNotTheVolumesAlone(t *testing.T) {
	cases := []struct {
		what  string
		vol   ports.VolumeInfo
		err   error
		mount ports.Mount
	}{
		{"another filesystem", vol, nil, ports.Mount{Source: "/dev/sda1"}},
		{"any mount once the volume is gone", ports.VolumeInfo{}, notFound("v"), ports.Mount{Source: "ferry/ferry/v"}},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			n, store, mnt := newNode(t)
			store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(c.vol, c.err)
			mnt.EXPECT().MountAt(podTarget).Return(c.mount, true, nil)
			// No Unmount, no RemoveDir expected.
			if err := n.Unpublish(ctx, "v", podTarget); !errors.Is(err, refusal.ErrPrecondition) {
				t.Fatalf("err = %v, want ErrPrecondition", err)
			}
		})
	}
}

func TestUnpublishUnmountsEveryStackedMountOfTheVolumeThenRemovesTheDirectory(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	gomock.InOrder(
		mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil),
		mnt.EXPECT().Unmount(gomock.Any(), podTargetParts).Return(nil),
		mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil),
		mnt.EXPECT().Unmount(gomock.Any(), podTargetParts).Return(nil),
		mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil),
		mnt.EXPECT().RemoveDir(podTargetParts).Return(true, nil),
	)
	if err := n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatal(err)
	}
}

// A fence (the node lost its lease) left its read-only placeholder at the
// target: the kubelet's unpublish removes it like the volume's own mount.
func TestUnpublishRemovesAFencesPlaceholder(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	gomock.InOrder(
		mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: ports.FencedMountSource, ReadOnly: true}, true, nil),
		mnt.EXPECT().Unmount(gomock.Any(), podTargetParts).Return(nil),
		mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil),
		mnt.EXPECT().RemoveDir(podTargetParts).Return(true, nil),
	)
	if err := n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatal(err)
	}
}

func TestStatsOnlyForAPathWhereTheVolumeIsPublished(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(3)
	mnt.EXPECT().MountAt("/var/lib/kubelet/elsewhere").Return(ports.Mount{Source: "other"}, true, nil)
	if _, err := n.Stats(ctx, "v", "/var/lib/kubelet/elsewhere"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if _, err := n.Stats(ctx, "v", "/etc"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("outside the kubelet dir: err = %v, want ErrNotFound", err)
	}
	mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil)
	mnt.EXPECT().Stats(podTarget).Return(ports.FsStats{TotalBytes: 10}, nil)
	if st, err := n.Stats(ctx, "v", podTarget); err != nil || st.TotalBytes != 10 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
	var inv *volume.InvalidError
	if _, err := n.Stats(ctx, "v", "/var/lib/kubelet/pods/../../../etc"); !errors.As(err, &inv) {
		t.Fatalf("traversal: err = %v, want InvalidError", err)
	}
}

// A publish waits (ErrPending, retried) while the process's lock of its
// volume is held, by the controller's use cases too when the table is
// shared (Config.Locks): a DeleteVolume in progress, say.
func TestAPublishWaitsWhileTheSharedLockOfItsVolumeIsHeld(t *testing.T) {
	ctrl := gomock.NewController(t)
	locks := volumelock.New()
	n := publish.New(publish.Config{Node: "node-1", Locks: locks}, mocks.NewMockSnapshotStore(ctrl), mocks.NewMockMounter(ctrl), zap.NewNop())
	unlock, ok := locks.TryLock("volume/v")
	if !ok {
		t.Fatal("the lock of v is held already")
	}
	defer unlock()
	err := n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: volume.Capability{Mode: volume.SingleNodeWriter}})
	if !errors.Is(err, refusal.ErrPending) {
		t.Fatalf("publish while the volume's lock is held elsewhere: %v, want ErrPending", err)
	}
}
