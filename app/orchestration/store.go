package orchestration

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is what orchestration needs of the node's pool: the copies it
// holds (ports.SnapshotStore is the whole contract its adapters keep).
type Store interface {
	ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error)
	CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (ports.SnapshotInfo, error)
}
