package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// NodePlacement tells the scheduler where volumes may be used (Kubernetes:
// the replica.ferry.zfs.csi.io/<volume>=ready labels of a node, which each
// volume's PV requires in its node affinity).
type NodePlacement interface {
	// Place makes node's placement say exactly: the volumes in usable may
	// be used there; no other volume may, except those in unknown, whose
	// placement is left as it is (their state could not be read, and a
	// transient error must not move a volume away). It writes nothing when
	// the placement already says so, and is safe to call again after any
	// error.
	Place(ctx context.Context, node replica.Node, usable, unknown []volume.ID) error
}

// NodeDirectory tells which nodes may hold Ferry's copies, for a state
// rebuilt from them (replica.Rediscover), and which nodes are gone for
// good (Kubernetes: the nodes Ferry's node DaemonSet has a pod on, running
// or not; a Node object deleted).
type NodeDirectory interface {
	FerryNodes(ctx context.Context) ([]replica.Node, error)
	// NodeExists is false once the node's object is deleted (an
	// operator said it will not come back).
	NodeExists(ctx context.Context, node replica.Node) (bool, error)
}

// VolumeDirectory tells whether a volume still exists for the cluster's
// users (Kubernetes: a PersistentVolume of this driver with this handle),
// and what it is to them: a copy of a volume whose state is lost is
// rebuilt only then, never one of a volume deleted while its node was
// away, and with the volume's size and factor, not one copy's.
type VolumeDirectory interface {
	Volume(ctx context.Context, id volume.ID) (UserVolume, bool, error)
}

// UserVolume is a volume as its users have it.
type UserVolume struct {
	CapacityBytes int64
	// ReplicationFactor is the factor it was made with, as recorded with
	// it ("": not recorded).
	ReplicationFactor string
}
