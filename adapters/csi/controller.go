package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ferry-csi/ferry/app/provision"
)

// TopologyKey labels the node a volume is reachable from.
const TopologyKey = "topology.ferry.zfs.csi.io/node"

// Controller serves the CSI Controller service.
type Controller struct {
	csi.UnimplementedControllerServer
	UC *provision.Service
	// NodeExpansion: do not advertise controller expansion, so that the
	// external-resizer only records the new size and the node that
	// publishes the volume grows it (NodeExpandVolume). A controller that
	// runs on every node next to its own pool (the node plugin serving the
	// controller service) cannot reach a volume on another node.
	NodeExpansion bool
}

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	// SINGLE_NODE_SINGLE_WRITER and _MULTI_WRITER are understood: a
	// ReadWriteOncePod claim is published read/write at one target only.
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
}

func (c *Controller) ControllerGetCapabilities(ctx context.Context, _ *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	out := make([]*csi.ControllerServiceCapability, 0, len(controllerCaps))
	for _, t := range controllerCaps {
		if t == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME && c.NodeExpansion {
			continue
		}
		out = append(out, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: out}, nil
}

func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, required("name")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, required("volume_capabilities")
	}
	ucReq := provision.CreateVolumeRequest{
		Name:         req.GetName(),
		Capacity:     capacityRange(req.GetCapacityRange()),
		Capabilities: capabilities(req.GetVolumeCapabilities()),
		Parameters:   req.GetParameters(),
		Secrets:      req.GetSecrets(),
	}
	if src := req.GetVolumeContentSource(); src != nil {
		switch {
		case src.GetSnapshot() != nil:
			ucReq.SourceSnapshotID = src.GetSnapshot().GetSnapshotId()
			if ucReq.SourceSnapshotID == "" {
				return nil, required("volume_content_source.snapshot.snapshot_id")
			}
		case src.GetVolume() != nil:
			ucReq.SourceVolumeID = src.GetVolume().GetVolumeId()
			if ucReq.SourceVolumeID == "" {
				return nil, required("volume_content_source.volume.volume_id")
			}
		default:
			return nil, status.Error(codes.InvalidArgument, "volume_content_source has no snapshot and no volume")
		}
	}
	v, err := c.UC.CreateVolume(ctx, ucReq)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.CreateVolumeResponse{Volume: toCSIVolume(v)}, nil
}

func toCSIVolume(v provision.Volume) *csi.Volume {
	out := &csi.Volume{
		VolumeId:           string(v.ID),
		CapacityBytes:      v.CapacityBytes,
		VolumeContext:      v.Context,
		AccessibleTopology: topology(v),
	}
	switch {
	case v.SourceSnapshotID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: v.SourceSnapshotID}}}
	case v.SourceVolumeID != "":
		out.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.SourceVolumeID}}}
	}
	return out
}

func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, required("volume_id")
	}
	if err := c.UC.DeleteVolume(ctx, req.GetVolumeId()); err != nil {
		return nil, toStatus(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, required("volume_id")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, required("volume_capabilities")
	}
	ok, why, err := c.UC.ValidateCapabilities(ctx, req.GetVolumeId(), capabilities(req.GetVolumeCapabilities()), req.GetParameters())
	if err != nil {
		return nil, toStatus(err)
	}
	if !ok {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if seg := req.GetAccessibleTopology().GetSegments(); seg != nil {
		if node, ok := seg[TopologyKey]; ok && node != string(c.UC.Node()) {
			return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
		}
	}
	n, err := c.UC.Capacity(ctx, req.GetParameters())
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: n}, nil
}

func (c *Controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	vols, next, err := c.UC.ListVolumes(ctx, int(req.GetMaxEntries()), req.GetStartingToken())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: toCSIVolume(v)})
	}
	return resp, nil
}

func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, required("volume_id")
	}
	if req.GetCapacityRange() == nil {
		return nil, required("capacity_range")
	}
	size, err := c.UC.ExpandVolume(ctx, req.GetVolumeId(), capacityRange(req.GetCapacityRange()))
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: false}, nil
}

func (c *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, required("name")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, required("source_volume_id")
	}
	s, err := c.UC.CreateSnapshot(ctx, req.GetName(), req.GetSourceVolumeId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.CreateSnapshotResponse{Snapshot: toCSISnapshot(s)}, nil
}

func toCSISnapshot(s provision.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     s.ID,
		SourceVolumeId: string(s.SourceVolumeID),
		CreationTime:   timestamppb.New(s.CreatedAt),
		SizeBytes:      s.SizeBytes,
		ReadyToUse:     s.ReadyToUse,
	}
}

func (c *Controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, required("snapshot_id")
	}
	if err := c.UC.DeleteSnapshot(ctx, req.GetSnapshotId()); err != nil {
		return nil, toStatus(err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

func (c *Controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	snaps, next, err := c.UC.ListSnapshots(ctx, req.GetSnapshotId(), req.GetSourceVolumeId(), int(req.GetMaxEntries()), req.GetStartingToken())
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &csi.ListSnapshotsResponse{NextToken: next}
	for _, s := range snaps {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: toCSISnapshot(s)})
	}
	return resp, nil
}

// topology is where the volume may be used: its node and, for a
// replicated volume, every node carrying its placement label (the PV's
// node affinity ORs the segments).
func topology(v provision.Volume) []*csi.Topology {
	t := []*csi.Topology{{Segments: map[string]string{TopologyKey: string(v.Node)}}}
	if len(v.Usable) > 0 {
		t = append(t, &csi.Topology{Segments: v.Usable})
	}
	return t
}
