package publish

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is what publishing needs of the node's pool (ports.SnapshotStore
// is the whole contract its adapters keep).
type Store interface {
	GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error)
	Remount(ctx context.Context, id volume.ID) error
	Resize(ctx context.Context, id volume.ID, capacityBytes int64) error
	SetMetadata(ctx context.Context, id volume.ID, metadata map[string]string) error
	LoadKey(ctx context.Context, id volume.ID, key volume.Key) error
	UnloadKey(ctx context.Context, id volume.ID) error
}
