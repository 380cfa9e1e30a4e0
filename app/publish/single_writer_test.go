package publish_test

import (
	"errors"
	"testing"

	"go.uber.org/mock/gomock"

	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// A ReadWriteOncePod claim (SINGLE_NODE_SINGLE_WRITER) is published
// read/write at one target of the node only: while another pod's target
// holds the volume read/write, the publish is a precondition failure and
// mounts nothing; a read-only mount elsewhere, or a mode that lets pods
// of a node share the volume (SINGLE_NODE_MULTI_WRITER), is no conflict.
func TestASingleWriterVolumeIsPublishedReadWriteAtOneTargetOnly(t *testing.T) {
	const other = "/var/lib/kubelet/pods/y/mount"
	for _, c := range []struct {
		name      string
		mode      volume.AccessMode
		readOnly  bool
		otherRO   bool
		wantMount bool
	}{
		{"single writer, another read/write target", volume.SingleNodeSingleWriter, false, false, false},
		{"single writer, another read-only target", volume.SingleNodeSingleWriter, false, true, true},
		{"single writer asked read-only", volume.SingleNodeSingleWriter, true, false, true},
		{"multi writer, another read/write target", volume.SingleNodeMultiWriter, false, false, true},
		{"single node writer, another read/write target", volume.SingleNodeWriter, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, store, mnt := newNode(t)
			store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
			mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
			mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath, other}, nil).AnyTimes()
			mnt.EXPECT().MountAt(other).Return(ports.Mount{Source: vol.MountSource, ReadOnly: c.otherRO}, true, nil).AnyTimes()
			if c.wantMount {
				mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, c.readOnly).Return(nil)
			}
			err := n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, ReadOnly: c.readOnly, Capability: volume.Capability{Mode: c.mode}})
			if c.wantMount && err != nil {
				t.Fatalf("publish: %v", err)
			}
			if !c.wantMount && !errors.Is(err, refusal.ErrPrecondition) {
				t.Fatalf("publish: %v, want ErrPrecondition", err)
			}
		})
	}
}
