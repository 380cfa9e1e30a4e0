package csi_test

import (
	"testing"

	spec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/adapters/csi"
	"github.com/ferry-csi/ferry/domain/volume"
)

func TestCreateVolumeReportsSizeContextAndTopology(t *testing.T) {
	e := newEnv(t)
	v := e.mustCreate(t, createReq("vol-1", volume.MiB+1))
	if v.GetVolumeId() != "vol-1" {
		t.Errorf("volume_id = %q, want vol-1", v.GetVolumeId())
	}
	if v.GetCapacityBytes() != 2*volume.MiB {
		t.Errorf("capacity = %d, want %d (rounded up to a MiB)", v.GetCapacityBytes(), 2*volume.MiB)
	}
	if got := v.GetVolumeContext(); got["pool"] != poolName || got["replicationFactor"] != "1" {
		t.Errorf("volume_context = %v", got)
	}
	top := v.GetAccessibleTopology()
	if len(top) != 1 || top[0].GetSegments()[csi.TopologyKey] != nodeName {
		t.Errorf("accessible_topology = %v, want %s=%s", top, csi.TopologyKey, nodeName)
	}
	if names := e.storeEntries(t); len(names) != 1 || names[0] != "vol-1" {
		t.Errorf("store directory holds %q, want [vol-1]", names)
	}
}

func TestCreateVolumeWithTheSameRequestTwiceReturnsTheSameVolume(t *testing.T) {
	e := newEnv(t)
	req := createReq("vol-1", 3*volume.MiB)
	req.Parameters = map[string]string{"compression": "lz4", "csi.storage.k8s.io/pvc/name": "data"}
	first := e.mustCreate(t, req)
	second := e.mustCreate(t, req)
	if first.GetVolumeId() != second.GetVolumeId() || first.GetCapacityBytes() != second.GetCapacityBytes() {
		t.Fatalf("second answer %v differs from the first %v", second, first)
	}
	if ids := e.volumeIDs(t); len(ids) != 1 {
		t.Fatalf("ListVolumes = %q, want one volume", ids)
	}
}

func TestCreateVolumeCapacityRangesMapToTheirCodes(t *testing.T) {
	cases := []struct {
		what string
		r    *spec.CapacityRange
		want codes.Code
		size int64
	}{
		{"no range gives the default size", nil, codes.OK, volume.DefaultCapacity},
		{"a limit only caps the default", &spec.CapacityRange{LimitBytes: 100 * volume.MiB}, codes.OK, 100 * volume.MiB},
		{"a tiny required size becomes the minimum", &spec.CapacityRange{RequiredBytes: 1}, codes.OK, volume.MiB},
		{"a limit below the required size", &spec.CapacityRange{RequiredBytes: 2 * volume.GiB, LimitBytes: volume.GiB}, codes.InvalidArgument, 0},
		{"a negative required size", &spec.CapacityRange{RequiredBytes: -1}, codes.InvalidArgument, 0},
		{"a required size beyond the pool", &spec.CapacityRange{RequiredBytes: poolBytes + volume.GiB}, codes.ResourceExhausted, 0},
		{"a limit below 1 MiB", &spec.CapacityRange{LimitBytes: 1000}, codes.OutOfRange, 0},
		{"rounding up past the limit", &spec.CapacityRange{RequiredBytes: volume.MiB + 1, LimitBytes: volume.MiB + 2}, codes.OutOfRange, 0},
		{"a required size beyond the maximum", &spec.CapacityRange{RequiredBytes: volume.MaxCapacity + 1}, codes.OutOfRange, 0},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			req := createReq("vol-1", 0)
			req.CapacityRange = c.r
			resp, err := e.ctrl.CreateVolume(ctx(t), req)
			wantCode(t, err, c.want)
			if c.want != codes.OK {
				e.assertNothingCreated(t)
				return
			}
			if got := resp.GetVolume().GetCapacityBytes(); got != c.size {
				t.Fatalf("capacity = %d, want %d", got, c.size)
			}
		})
	}
}

func TestCreateVolumeWithTheNameOfAnExistingVolumeAnswersByCompatibility(t *testing.T) {
	cases := []struct {
		what   string
		change func(*spec.CreateVolumeRequest)
		want   codes.Code
	}{
		{"a smaller required size still fits", func(r *spec.CreateVolumeRequest) { r.CapacityRange.RequiredBytes = volume.MiB }, codes.OK},
		{"a limit the volume fits under", func(r *spec.CreateVolumeRequest) { r.CapacityRange.LimitBytes = 2 * volume.GiB }, codes.OK},
		{"a larger required size", func(r *spec.CreateVolumeRequest) { r.CapacityRange.RequiredBytes = 2 * volume.GiB }, codes.AlreadyExists},
		{"a limit below the volume's size", func(r *spec.CreateVolumeRequest) {
			r.CapacityRange.LimitBytes = 512 * volume.MiB
			r.CapacityRange.RequiredBytes = 0
		}, codes.AlreadyExists},
		{"other parameters", func(r *spec.CreateVolumeRequest) { r.Parameters = map[string]string{"compression": "lz4"} }, codes.AlreadyExists},
		{"a content source", func(r *spec.CreateVolumeRequest) {
			r.VolumeContentSource = &spec.VolumeContentSource{Type: &spec.VolumeContentSource_Volume{Volume: &spec.VolumeContentSource_VolumeSource{VolumeId: "other"}}}
		}, codes.AlreadyExists},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("other", 0))
			first := e.mustCreate(t, createReq("vol-1", volume.GiB))
			req := createReq("vol-1", volume.GiB)
			c.change(req)
			resp, err := e.ctrl.CreateVolume(ctx(t), req)
			wantCode(t, err, c.want)
			if err == nil && resp.GetVolume().GetCapacityBytes() != first.GetCapacityBytes() {
				t.Fatalf("capacity = %d, want the existing %d", resp.GetVolume().GetCapacityBytes(), first.GetCapacityBytes())
			}
			if ids := e.volumeIDs(t); len(ids) != 2 {
				t.Fatalf("ListVolumes = %q, want [other vol-1]", ids)
			}
		})
	}
}

func TestCreateVolumeRefusesWhatFerryCannotServeWithInvalidArgument(t *testing.T) {
	mode := func(m spec.VolumeCapability_AccessMode_Mode) []*spec.VolumeCapability {
		return []*spec.VolumeCapability{mountCap(m)}
	}
	cases := []struct {
		what string
		caps []*spec.VolumeCapability
	}{
		{"no capability", nil},
		{"block access", []*spec.VolumeCapability{blockCap()}},
		{"neither block nor mount", []*spec.VolumeCapability{{AccessMode: &spec.VolumeCapability_AccessMode{Mode: spec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}},
		{"an unset access mode", []*spec.VolumeCapability{{AccessType: &spec.VolumeCapability_Mount{Mount: &spec.VolumeCapability_MountVolume{}}}}},
		{"multi-node reader-only", mode(spec.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)},
		{"multi-node single-writer", mode(spec.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER)},
		{"multi-node multi-writer", mode(spec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)},
		{"a good capability beside a multi-node one", append(mode(spec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER), mountCap(spec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER))},
		{"a filesystem that is not ZFS", []*spec.VolumeCapability{{
			AccessType: &spec.VolumeCapability_Mount{Mount: &spec.VolumeCapability_MountVolume{FsType: "ntfs"}},
			AccessMode: &spec.VolumeCapability_AccessMode{Mode: spec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		}}},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			_, err := e.ctrl.CreateVolume(ctx(t), &spec.CreateVolumeRequest{Name: "vol-1", VolumeCapabilities: c.caps})
			wantCode(t, err, codes.InvalidArgument)
			e.assertNothingCreated(t)
		})
	}
}

func TestDeleteVolumeTwiceSucceedsBothTimes(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	for i := 0; i < 2; i++ {
		_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
		wantCode(t, err, codes.OK)
	}
	e.assertNothingCreated(t)
	_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

func TestDeleteVolumeWithASnapshotFailsUntilTheSnapshotIsDeleted(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	snap := e.mustSnapshot(t, "snap-1", "vol-1")
	_, err := e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
	wantCode(t, err, codes.FailedPrecondition)
	if ids := e.volumeIDs(t); len(ids) != 1 {
		t.Fatalf("the volume is gone after a refused delete: %q", ids)
	}
	_, err = e.ctrl.DeleteSnapshot(ctx(t), &spec.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()})
	wantCode(t, err, codes.OK)
	_, err = e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
	wantCode(t, err, codes.OK)
	e.assertNothingCreated(t)
}

func TestDeleteVolumeOfAPublishedVolumeFailsUntilItIsUnpublished(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	e.writeFile(t, "vol-1", "data", "keep me")
	_, err := e.node.NodePublishVolume(ctx(t), publishReq("vol-1", target, false))
	wantCode(t, err, codes.OK)
	_, err = e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
	wantCode(t, err, codes.FailedPrecondition)
	if ids := e.volumeIDs(t); len(ids) != 1 || e.readFile(t, "vol-1", "data") != "keep me" {
		t.Fatalf("a refused delete changed the volume: volumes %q", ids)
	}
	_, err = e.node.NodeUnpublishVolume(ctx(t), &spec.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: target})
	wantCode(t, err, codes.OK)
	_, err = e.ctrl.DeleteVolume(ctx(t), &spec.DeleteVolumeRequest{VolumeId: "vol-1"})
	wantCode(t, err, codes.OK)
	e.assertNothingCreated(t)
}

func TestControllerExpandVolumeGrowsTheVolumeAndIsIdempotent(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", volume.GiB))
	req := &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: 2*volume.GiB + 1}}
	for i := 0; i < 2; i++ {
		resp, err := e.ctrl.ControllerExpandVolume(ctx(t), req)
		wantCode(t, err, codes.OK)
		if resp.GetCapacityBytes() != 2*volume.GiB+volume.MiB || resp.GetNodeExpansionRequired() {
			t.Fatalf("call %d: capacity %d, node expansion %v; want %d, false", i+1, resp.GetCapacityBytes(), resp.GetNodeExpansionRequired(), 2*volume.GiB+volume.MiB)
		}
	}
	resp, err := e.ctrl.ListVolumes(ctx(t), &spec.ListVolumesRequest{})
	wantCode(t, err, codes.OK)
	if got := resp.GetEntries()[0].GetVolume().GetCapacityBytes(); got != 2*volume.GiB+volume.MiB {
		t.Fatalf("listed capacity = %d after expansion", got)
	}
	// A smaller request leaves the volume as large as it is.
	small, err := e.ctrl.ControllerExpandVolume(ctx(t), &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: volume.GiB}})
	wantCode(t, err, codes.OK)
	if small.GetCapacityBytes() != 2*volume.GiB+volume.MiB {
		t.Fatalf("a smaller request reported %d", small.GetCapacityBytes())
	}
}

func TestControllerExpandVolumeAnswersCodesForBadRequests(t *testing.T) {
	cases := []struct {
		what string
		req  *spec.ControllerExpandVolumeRequest
		want codes.Code
	}{
		{"a missing volume", &spec.ControllerExpandVolumeRequest{VolumeId: "nope", CapacityRange: &spec.CapacityRange{RequiredBytes: volume.GiB}}, codes.NotFound},
		{"no volume id", &spec.ControllerExpandVolumeRequest{CapacityRange: &spec.CapacityRange{RequiredBytes: volume.GiB}}, codes.InvalidArgument},
		{"no capacity range", &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1"}, codes.InvalidArgument},
		{"a limit below the required size", &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: 2 * volume.GiB, LimitBytes: volume.GiB}}, codes.InvalidArgument},
		{"a size beyond the maximum", &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: volume.MaxCapacity + 1}}, codes.OutOfRange},
		{"a size beyond the pool", &spec.ControllerExpandVolumeRequest{VolumeId: "vol-1", CapacityRange: &spec.CapacityRange{RequiredBytes: 2 * poolBytes}}, codes.ResourceExhausted},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			e := newEnv(t)
			e.mustCreate(t, createReq("vol-1", volume.GiB))
			_, err := e.ctrl.ControllerExpandVolume(ctx(t), c.req)
			wantCode(t, err, c.want)
		})
	}
}

func TestValidateVolumeCapabilitiesConfirmsOnlyWhatFerryServes(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", 0))
	cases := []struct {
		what      string
		req       *spec.ValidateVolumeCapabilitiesRequest
		want      codes.Code
		confirmed bool
	}{
		{"a single-node filesystem", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1", VolumeCapabilities: []*spec.VolumeCapability{rwCap()}}, codes.OK, true},
		{"block access", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1", VolumeCapabilities: []*spec.VolumeCapability{blockCap()}}, codes.OK, false},
		{"a multi-node mode", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1", VolumeCapabilities: []*spec.VolumeCapability{mountCap(spec.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}}, codes.OK, false},
		{"a bad parameter", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1", VolumeCapabilities: []*spec.VolumeCapability{rwCap()}, Parameters: map[string]string{"mountpoint": "/"}}, codes.OK, false},
		{"a missing volume", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "nope", VolumeCapabilities: []*spec.VolumeCapability{rwCap()}}, codes.NotFound, false},
		{"no capabilities", &spec.ValidateVolumeCapabilitiesRequest{VolumeId: "vol-1"}, codes.InvalidArgument, false},
		{"no volume id", &spec.ValidateVolumeCapabilitiesRequest{VolumeCapabilities: []*spec.VolumeCapability{rwCap()}}, codes.InvalidArgument, false},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			resp, err := e.ctrl.ValidateVolumeCapabilities(ctx(t), c.req)
			wantCode(t, err, c.want)
			if got := resp.GetConfirmed() != nil; got != c.confirmed {
				t.Fatalf("confirmed = %v, want %v (message %q)", got, c.confirmed, resp.GetMessage())
			}
			if err == nil && !c.confirmed && resp.GetMessage() == "" {
				t.Fatal("an unconfirmed answer carries no reason")
			}
		})
	}
}

func TestGetCapacityReportsThePoolLessWhatVolumesReserve(t *testing.T) {
	e := newEnv(t)
	e.mustCreate(t, createReq("vol-1", volume.GiB))
	cases := []struct {
		what string
		req  *spec.GetCapacityRequest
		want int64
	}{
		{"this node's pool", &spec.GetCapacityRequest{}, poolBytes - volume.GiB},
		{"this node's topology", &spec.GetCapacityRequest{AccessibleTopology: &spec.Topology{Segments: map[string]string{csi.TopologyKey: nodeName}}}, poolBytes - volume.GiB},
		{"another node's topology", &spec.GetCapacityRequest{AccessibleTopology: &spec.Topology{Segments: map[string]string{csi.TopologyKey: "node-2"}}}, 0},
		{"another pool", &spec.GetCapacityRequest{Parameters: map[string]string{"pool": "tank"}}, 0},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			resp, err := e.ctrl.GetCapacity(ctx(t), c.req)
			wantCode(t, err, codes.OK)
			if resp.GetAvailableCapacity() != c.want {
				t.Fatalf("available = %d, want %d", resp.GetAvailableCapacity(), c.want)
			}
		})
	}
	_, err := e.ctrl.GetCapacity(ctx(t), &spec.GetCapacityRequest{Parameters: map[string]string{"mountpoint": "/"}})
	wantCode(t, err, codes.InvalidArgument)
}
