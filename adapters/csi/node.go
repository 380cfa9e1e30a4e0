package csi

import (
	"context"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/domain/volume"
)

// Node serves the CSI Node service.
type Node struct {
	csi.UnimplementedNodeServer
	UC *publish.Service
}

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER, // and SINGLE_NODE_SINGLE_WRITER enforced (ReadWriteOncePod)
}

func (n *Node) NodeGetCapabilities(ctx context.Context, _ *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	out := make([]*csi.NodeServiceCapability, 0, len(nodeCaps))
	for _, t := range nodeCaps {
		out = append(out, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: out}, nil
}

func (n *Node) NodeGetInfo(ctx context.Context, _ *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	node := string(n.UC.NodeID())
	return &csi.NodeGetInfoResponse{
		NodeId:             node,
		AccessibleTopology: &csi.Topology{Segments: map[string]string{TopologyKey: node}},
	}, nil
}

func (n *Node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, required("volume_id")
	case req.GetTargetPath() == "":
		return nil, required("target_path")
	case req.GetVolumeCapability() == nil:
		return nil, required("volume_capability")
	}
	err := n.UC.Publish(ctx, publish.Request{
		VolumeID:   req.GetVolumeId(),
		TargetPath: req.GetTargetPath(),
		ReadOnly:   req.GetReadonly(),
		Capability: capability(req.GetVolumeCapability()),
		Secrets:    req.GetSecrets(),
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *Node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, required("volume_id")
	case req.GetTargetPath() == "":
		return nil, required("target_path")
	}
	if err := n.UC.Unpublish(ctx, req.GetVolumeId(), req.GetTargetPath()); err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (n *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, required("volume_id")
	case req.GetVolumePath() == "":
		return nil, required("volume_path")
	}
	st, err := n.UC.Stats(ctx, req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: st.TotalBytes, Available: st.AvailableBytes, Used: st.UsedBytes},
		{Unit: csi.VolumeUsage_INODES, Total: st.TotalInodes, Available: st.FreeInodes, Used: st.UsedInodes},
	}}, nil
}

func (n *Node) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, required("volume_id")
	case req.GetVolumePath() == "":
		return nil, required("volume_path")
	}
	if c := req.GetVolumeCapability(); c != nil && c.GetBlock() != nil {
		return nil, status.Error(codes.InvalidArgument, "block volumes are not supported")
	}
	var want *volume.CapacityRange
	if r := req.GetCapacityRange(); r.GetRequiredBytes() > 0 {
		cr := capacityRange(r)
		want = &cr
	}
	size, err := n.UC.Expand(ctx, req.GetVolumeId(), req.GetVolumePath(), want)
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
