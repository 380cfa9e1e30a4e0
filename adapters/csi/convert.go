package csi

import (
	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/ferry-csi/ferry/domain/volume"
)

var accessModes = map[csi.VolumeCapability_AccessMode_Mode]volume.AccessMode{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        volume.SingleNodeWriter,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   volume.SingleNodeReaderOnly,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: volume.SingleNodeSingleWriter,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  volume.SingleNodeMultiWriter,
	csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    volume.MultiNodeReaderOnly,
	csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:  volume.MultiNodeSingleWriter,
	csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   volume.MultiNodeMultiWriter,
}

func capability(c *csi.VolumeCapability) volume.Capability {
	var out volume.Capability
	if c == nil {
		return out
	}
	if c.GetBlock() != nil {
		out.Block = true
	}
	if m := c.GetMount(); m != nil {
		out.FsType = m.GetFsType()
	}
	if c.GetBlock() == nil && c.GetMount() == nil {
		out.Block = true // neither: not a filesystem request Ferry can honour
	}
	out.Mode = accessModes[c.GetAccessMode().GetMode()]
	return out
}

func capabilities(cs []*csi.VolumeCapability) []volume.Capability {
	out := make([]volume.Capability, 0, len(cs))
	for _, c := range cs {
		out = append(out, capability(c))
	}
	return out
}

func capacityRange(r *csi.CapacityRange) volume.CapacityRange {
	return volume.CapacityRange{RequiredBytes: r.GetRequiredBytes(), LimitBytes: r.GetLimitBytes()}
}
