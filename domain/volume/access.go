package volume

// AccessMode is how a volume may be used, mirroring CSI's access modes.
type AccessMode int

const (
	AccessUnknown AccessMode = iota
	SingleNodeWriter
	SingleNodeReaderOnly
	SingleNodeSingleWriter
	SingleNodeMultiWriter
	MultiNodeReaderOnly
	MultiNodeSingleWriter
	MultiNodeMultiWriter
)

// Capability is one requested volume capability. Ferry serves filesystems
// only: its volumes are ZFS datasets bind-mounted into pods.
type Capability struct {
	Block bool
	Mode  AccessMode
	// FsType, when set, must name the filesystem Ferry provides ("zfs").
	FsType string
}

// FsType is the only filesystem type Ferry volumes have.
const FsType = "zfs"

// acceptedFsTypes: empty and "zfs" ask for what Ferry provides; "ext4" and
// "xfs" are the defaults kubelet and the external-provisioner fill in when a
// StorageClass names none, so they are accepted and a ZFS filesystem is
// provided all the same. Any other type is a request Ferry cannot honour.
var acceptedFsTypes = map[string]bool{"": true, FsType: true, "ext4": true, "xfs": true}

// Supported says whether Ferry can honour the capability, and why not.
// A volume is read/write on one node at a time (the primary); other nodes
// hold replicas, never mounts, so every multi-node mode is refused.
func (c Capability) Supported() (bool, string) {
	switch {
	case c.Block:
		return false, "block volumes are not supported: Ferry volumes are ZFS filesystems"
	case !acceptedFsTypes[c.FsType]:
		return false, "fs_type " + c.FsType + " is not supported: Ferry volumes are ZFS filesystems"
	}
	switch c.Mode {
	case SingleNodeWriter, SingleNodeReaderOnly, SingleNodeSingleWriter, SingleNodeMultiWriter:
		return true, ""
	case AccessUnknown:
		return false, "access mode is not set"
	default:
		return false, "multi-node access modes are not supported: a Ferry volume is mounted on one node at a time"
	}
}

// ReadOnly reports whether the mode never writes.
func (m AccessMode) ReadOnly() bool { return m == SingleNodeReaderOnly || m == MultiNodeReaderOnly }

// SingleWriterRefusal is the rule of SINGLE_NODE_SINGLE_WRITER (a
// ReadWriteOncePod claim): a read/write publish of that mode is refused
// while the volume is mounted read/write at another target of the node
// (writableElsewhere), and says why. Every other mode, and a read-only
// publish, shares the node's mounts as before (SINGLE_NODE_MULTI_WRITER
// and SINGLE_NODE_WRITER let pods of one node share the volume).
func SingleWriterRefusal(mode AccessMode, readOnly bool, writableElsewhere []string) (string, bool) {
	if mode != SingleNodeSingleWriter || readOnly || len(writableElsewhere) == 0 {
		return "", false
	}
	return "the volume's access mode is single writer (ReadWriteOncePod) and it is already published read/write at " + writableElsewhere[0], true
}
