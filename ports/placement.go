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
