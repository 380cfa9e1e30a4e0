package csi_test

import (
	"path/filepath"
	"strings"
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/adapters/csi"
)

const target = "/var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/vol-1/mount"

func publishReq(volumeID, target string, readOnly bool) *spec.NodePublishVolumeRequest {
	return &spec.NodePublishVolumeRequest{VolumeId: volumeID, TargetPath: target, Readonly: readOnly, VolumeCapability: rwCap()}
}

func TestNodePublishVolumeAnswersCodesForBadRequests(t *testing.T) {
	cases := []struct {
		what string
		req  *spec.NodePublishVolumeRequest
		want codes.Code
	}{
		{"no volume id", &spec.NodePublishVolumeRequest{TargetPath: target, VolumeCapability: rwCap()}, codes.InvalidArgument},
		{"no target path", &spec.NodePublishVolumeRequest{VolumeId: "vol-1", VolumeCapability: rwCap()}, codes.InvalidArgument},
		{"no capability", &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target}, codes.InvalidArgument},
		{"an unknown volume", publishReq("nope", target, false), codes.NotFound},
		{"a relative target path", publishReq("vol-1", "pods/uid-1/mount", false), codes.InvalidArgument},
		{"block access", &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target, VolumeCapability: blockCap()}, codes.InvalidArgument},
		{"a multi-node mode", &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target, VolumeCapability: mountCap(spec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("vol-1", 0))
			_, err := e.node.NodePublishVolume(ctx(t), c.req)
			wantCode(t, err, c.want)
			if mounts, _ := e.mount.snapshot(); len(mounts) != 0 {
				t.Fatalf("mounts = %v, want none", mounts)
			}
		})
	}
}

func TestNodePublishVolumeTwiceTheSameWayMountsOnce(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	for i := 0; i < 2; i++ {
		_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false))
		wantCode(t, err, codes.OK)
	}
	mounts, binds := e.mount.snapshot()
	if binds != 1 || len(mounts) != 1 {
		t.Fatalf("%d bind mounts, table %v; want one", binds, mounts)
	}
	if m := mounts[target]; m.Source != filepath.Join(e.dir, "vol-1") || m.ReadOnly {
		t.Fatalf("mount at target = %+v, want the volume's directory read-write", m)
	}
	// A target spelled with a trailing slash is not in its clean form: no
	// kubelet sends one, and Ferry does not rewrite paths.
	_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target+"/", false))
	wantCode(t, err, codes.InvalidArgument)
	if _, binds := e.mount.snapshot(); binds != 1 {
		t.Fatalf("%d bind mounts after a refused target, want 1", binds)
	}
}

func TestNodePublishVolumeReadOnlyIsHonoured(t *testing.T) {
	cases := []struct {
		what     string
		req      *spec.NodePublishVolumeRequest
		readOnly bool
	}{
		{"the readonly flag", publishReq("vol-1", target, true), true},
		{"a reader-only access mode", &spec.NodePublishVolumeRequest{VolumeId: "vol-1", TargetPath: target, VolumeCapability: mountCap(spec.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, true},
		{"a writer access mode", publishReq("vol-1", target, false), false},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("vol-1", 0))
			_, err := e.node.NodePublishVolume(ctx(t), c.req)
			wantCode(t, err, codes.OK)
			if mounts, _ := e.mount.snapshot(); mounts[target].ReadOnly != c.readOnly {
				t.Fatalf("mount = %+v, want read-only %v", mounts[target], c.readOnly)
			}
		})
	}
}

func TestNodePublishVolumeAtATargetHoldingSomethingElseIsAlreadyExists(t *testing.T) {
	cases := []struct {
		what  string
		first *spec.NodePublishVolumeRequest
		then  *spec.NodePublishVolumeRequest
	}{
		{"read-only after read-write", publishReq("vol-1", target, false), publishReq("vol-1", target, true)},
		{"read-write after read-only", publishReq("vol-1", target, true), publishReq("vol-1", target, false)},
		{"another volume", publishReq("vol-1", target, false), publishReq("vol-2", target, false)},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("vol-1", 0))
			e.mustCreate(t, createReq("vol-2", 0))
			_, err := e.node.NodePublishVolume(ctx(t), c.first)
			wantCode(t, err, codes.OK)
			before, _ := e.mount.snapshot()
			_, err = e.node.NodePublishVolume(ctx(t), c.then)
			wantCode(t, err, codes.AlreadyExists)
			if after, binds := e.mount.snapshot(); binds != 1 || after[target] != before[target] {
				t.Fatalf("the refused publish changed the mount: %+v -> %+v (%d binds)", before[target], after[target], binds)
			}
		})
	}
}

func TestNodeUnpublishVolumeTwiceSucceedsBothTimes(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false))
	wantCode(t, err, codes.OK)
	for i := 0; i < 2; i++ {
		_, err := e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
		wantCode(t, err, codes.OK)
	}
	if mounts, _ := e.mount.snapshot(); len(mounts) != 0 {
		t.Fatalf("mounts left = %v", mounts)
	}
}

func TestNodeUnpublishVolumeAnswersCodesForBadRequests(t *testing.T) {
	cases := []struct {
		what string
		req  *spec.NodeUnpublishVolumeRequest
		want codes.Code
	}{
		{"no volume id", &spec.NodeUnpublishVolumeRequest{TargetPath: target}, codes.InvalidArgument},
		{"no target path", &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1"}, codes.InvalidArgument},
		{"a relative target path", &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "pods/x"}, codes.InvalidArgument},
		{"a traversing target path", &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/var/lib/kubelet/pods/../../../etc"}, codes.InvalidArgument},
		{"a target path outside the kubelet dir", &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/etc/x"}, codes.InvalidArgument},
		{"a NUL byte in the target path", &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target + "\x00"}, codes.InvalidArgument},
		// Not mounted there is already unpublished, known volume or not:
		// after DeleteVolume the kubelet must not retry for ever.
		{"an unknown volume not mounted there", &spec.NodeUnpublishVolumeRequest{VolumeId: "nope", TargetPath: target}, codes.OK},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("vol-1", 0))
			_, err := e.node.NodeUnpublishVolume(ctx(t), c.req)
			wantCode(t, err, c.want)
		})
	}
}

// Unpublishing volume A must never tear down volume B's mount. The target
// holds something that is not A: the kubelet must not believe it clean,
// so the answer is FailedPrecondition, with B's mount left in place.
func TestNodeUnpublishVolumeLeavesAnotherVolumesMountAlone(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	e.mustCreate(t, createReq("vol-2", 0))
	_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-2", target, false))
	wantCode(t, err, codes.OK)
	_, err = e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
	wantCode(t, err, codes.FailedPrecondition)
	if mounts, _ := e.mount.snapshot(); mounts[target].Source != filepath.Join(e.dir, "vol-2") {
		t.Fatalf("unpublishing vol-1 removed vol-2's mount at the target: %v", mounts)
	}
}

func TestNodeGetVolumeStatsReportsOnlyWhereTheVolumeIsPublished(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	e.mustCreate(t, createReq("vol-2", 0))
	other := "/var/lib/kubelet/pods/uid-2/volumes/kubernetes.io~csi/vol-2/mount"
	for _, r := range []*spec.NodePublishVolumeRequest{publishReq("vol-1", target, false), publishReq("vol-2", other, false)} {
		if _, err := e.node.NodePublishVolume(ctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		what     string
		id, path string
		want     codes.Code
	}{
		{"the published target", "vol-1", target, codes.OK},
		{"the volume's own directory", "vol-1", filepath.Join(e.dir, "vol-1"), codes.OK},
		{"a path where nothing is published", "vol-1", "/var/lib/kubelet/pods/uid-9/mount", codes.NotFound},
		{"a path where another volume is published", "vol-1", other, codes.NotFound},
		{"a relative path (csi-sanity's \"some/path\")", "vol-1", "pods/x", codes.NotFound},
		{"a path outside the kubelet dir", "vol-1", "/etc", codes.NotFound},
		{"a traversing path", "vol-1", "/var/lib/kubelet/pods/../../../etc", codes.InvalidArgument},
		{"a traversing relative path", "vol-1", "../../etc", codes.InvalidArgument},
		{"a NUL byte", "vol-1", target + "\x00", codes.InvalidArgument},
		{"a path beyond 4096 bytes", "vol-1", "/var/lib/kubelet/" + strings.Repeat("p", 5000), codes.InvalidArgument},
		{"an unknown volume", "nope", target, codes.NotFound},
		{"no volume id", "", target, codes.InvalidArgument},
		{"no volume path", "vol-1", "", codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			resp, err := e.node.NodeGetVolumeStats(ctx(t), &spec.NodeGetVolumeStatsRequest{VolumeId: c.id, VolumePath: c.path})
			wantCode(t, err, c.want)
			if err != nil {
				return
			}
			var bytes, inodes *spec.VolumeUsage
			for _, u := range resp.GetUsage() {
				switch u.GetUnit() {
				case spec.VolumeUsage_BYTES:
					bytes = u
				case spec.VolumeUsage_INODES:
					inodes = u
				}
			}
			if bytes.GetTotal() != fakeStats.TotalBytes || bytes.GetAvailable() != fakeStats.AvailableBytes || bytes.GetUsed() != fakeStats.UsedBytes {
				t.Errorf("bytes usage = %v, want %+v", bytes, fakeStats)
			}
			if inodes.GetTotal() != fakeStats.TotalInodes || inodes.GetAvailable() != fakeStats.FreeInodes || inodes.GetUsed() != fakeStats.UsedInodes {
				t.Errorf("inodes usage = %v, want %+v", inodes, fakeStats)
			}
		})
	}
}

func TestNodeExpandVolumeReportsTheControllersSize(t *testing.T) {
	e := newEnv(t)
	v := e.mustCreate(t, createReq("vol-1", 0))
	cases := []struct {
		what string
		req  *spec.NodeExpandVolumeRequest
		want codes.Code
	}{
		{"a published volume", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target}, codes.OK},
		{"an unknown volume", &spec.NodeExpandVolumeRequest{VolumeId: "nope", VolumePath: target}, codes.NotFound},
		{"no volume path", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1"}, codes.InvalidArgument},
		{"a traversing volume path", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "/var/lib/kubelet/../../etc"}, codes.InvalidArgument},
		{"a NUL byte in the volume path", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target + "\x00"}, codes.InvalidArgument},
		{"a relative volume path (csi-sanity's \"some/path\")", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "some/path"}, codes.NotFound},
		{"block access", &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target, VolumeCapability: blockCap()}, codes.InvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			resp, err := e.node.NodeExpandVolume(ctx(t), c.req)
			wantCode(t, err, c.want)
			if err == nil && resp.GetCapacityBytes() != v.GetCapacityBytes() {
				t.Fatalf("capacity = %d, want %d", resp.GetCapacityBytes(), v.GetCapacityBytes())
			}
		})
	}
}

func TestNodeGetInfoNamesTheNodeAndItsTopology(t *testing.T) {
	e := newEnv(t)
	resp, err := e.node.NodeGetInfo(ctx(t), &spec.NodeGetInfoRequest{})
	wantCode(t, err, codes.OK)
	if resp.GetNodeId() != nodeName || resp.GetAccessibleTopology().GetSegments()[csi.TopologyKey] != nodeName {
		t.Fatalf("NodeGetInfo = %v", resp)
	}
}

// Where the controller service does not expand (it runs next to one pool
// and the volume may live on another node), the node that publishes the
// volume grows it: NodeExpandVolume with a larger capacity range resizes.
func TestNodeExpandVolumeGrowsTheVolumeWhenAskedForMore(t *testing.T) {
	e := newEnv(t)
	v := e.mustCreate(t, createReq("vol-1", 0))
	bigger := v.GetCapacityBytes() + 64<<20
	for i := 0; i < 2; i++ { // idempotent
		resp, err := e.node.NodeExpandVolume(ctx(t), &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target,
			CapacityRange: &spec.CapacityRange{RequiredBytes: bigger}})
		wantCode(t, err, codes.OK)
		if resp.GetCapacityBytes() != bigger {
			t.Fatalf("attempt %d: capacity %d, want %d", i, resp.GetCapacityBytes(), bigger)
		}
	}
	info, err := e.mem.GetVolume(ctx(t), "vol-1")
	if err != nil || info.CapacityBytes != bigger {
		t.Fatalf("the store holds %d (%v), want %d", info.CapacityBytes, err, bigger)
	}
	// Asking for less never shrinks.
	resp, err := e.node.NodeExpandVolume(ctx(t), &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target,
		CapacityRange: &spec.CapacityRange{RequiredBytes: 1 << 20}})
	wantCode(t, err, codes.OK)
	if resp.GetCapacityBytes() != bigger {
		t.Fatalf("capacity after asking for less: %d, want %d", resp.GetCapacityBytes(), bigger)
	}
	_, err = e.node.NodeExpandVolume(ctx(t), &spec.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: target,
		CapacityRange: &spec.CapacityRange{RequiredBytes: 2 * poolBytes}})
	wantCode(t, err, codes.ResourceExhausted)
}

func TestAControllerWithNodeExpansionDoesNotAdvertiseControllerExpansion(t *testing.T) {
	e := newEnv(t)
	has := func(c *csi.Controller) bool {
		resp, err := c.ControllerGetCapabilities(ctx(t), &spec.ControllerGetCapabilitiesRequest{})
		wantCode(t, err, codes.OK)
		for _, c := range resp.GetCapabilities() {
			if c.GetRpc().GetType() == spec.ControllerServiceCapability_RPC_EXPAND_VOLUME {
				return true
			}
		}
		return false
	}
	if !has(&csi.Controller{UC: e.ctrlUC}) || has(&csi.Controller{UC: e.ctrlUC, NodeExpansion: true}) {
		t.Fatal("EXPAND_VOLUME is advertised exactly when the controller expands")
	}
}
