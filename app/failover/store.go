package failover

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is what failover needs of the node's pool: its volumes and their
// snapshots, read (ports.SnapshotStore is the whole contract its adapters
// keep).
type Store interface {
	GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error)
	ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error)
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
}
