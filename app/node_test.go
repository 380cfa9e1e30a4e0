package app_test

import (
	"errors"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

func newNode(t *testing.T) (*app.Node, *mocks.MockSnapshotStore, *mocks.MockMounter) {
	ctrl := gomock.NewController(t)
	store, mnt := mocks.NewMockSnapshotStore(ctrl), mocks.NewMockMounter(ctrl)
	return app.NewNode(cfg, store, mnt, zap.NewNop()), store, mnt
}

var vol = ports.VolumeInfo{ID: "v", MountPath: "/ferry/ferry/v", MountSource: "ferry/ferry/v", CapacityBytes: volume.GiB}

func TestPublishBindMountsReadOnlyWhenTheModeNeverWrites(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	mnt.EXPECT().MountAt("/pods/x/mount").Return(ports.Mount{}, false, nil)
	mnt.EXPECT().BindMount(gomock.Any(), "/ferry/ferry/v", "/pods/x/mount", true).Return(nil)
	err := n.Publish(ctx, app.PublishRequest{VolumeID: "v", TargetPath: "/pods/x/mount", Capability: volume.Capability{Mode: volume.SingleNodeReaderOnly}})
	if err != nil {
		t.Fatal(err)
	}
}

func TestPublishAgainTheSameWayMountsNothingAndAnotherWayIsRefused(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(2)
	mnt.EXPECT().MountAt("/t").Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil).Times(2)
	req := app.PublishRequest{VolumeID: "v", TargetPath: "/t", Capability: volume.Capability{Mode: volume.SingleNodeWriter}}
	if err := n.Publish(ctx, req); err != nil {
		t.Fatalf("same publish again: %v", err)
	}
	req.ReadOnly = true
	if err := n.Publish(ctx, req); !errors.Is(err, app.ErrIncompatible) {
		t.Fatalf("read-only over read-write: %v, want ErrIncompatible", err)
	}
}

func TestPublishRefusesRelativeTargetsBeforeTouchingAnything(t *testing.T) {
	n, _, _ := newNode(t)
	err := n.Publish(ctx, app.PublishRequest{VolumeID: "v", TargetPath: "../../etc", Capability: volume.Capability{Mode: volume.SingleNodeWriter}})
	var inv *volume.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("err = %v, want InvalidError", err)
	}
}

func TestStatsOnlyForAPathWhereTheVolumeIsPublished(t *testing.T) {
	n, store, mnt := newNode(t)
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(2)
	mnt.EXPECT().MountAt("/elsewhere").Return(ports.Mount{Source: "other"}, true, nil)
	if _, err := n.Stats(ctx, "v", "/elsewhere"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	mnt.EXPECT().MountAt("/t").Return(ports.Mount{Source: "ferry/ferry/v"}, true, nil)
	mnt.EXPECT().Stats("/t").Return(ports.FsStats{TotalBytes: 10}, nil)
	if st, err := n.Stats(ctx, "v", "/t"); err != nil || st.TotalBytes != 10 {
		t.Fatalf("stats = %+v, %v", st, err)
	}
}
