package provision

import (
	"context"
	"io"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is what provisioning needs of the node's pool: volumes, their
// snapshots and copies between them (ports.SnapshotStore is the whole
// contract its adapters keep).
type Store interface {
	CreateVolume(ctx context.Context, id volume.ID, opts ports.CreateOptions) (ports.VolumeInfo, error)
	GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error)
	ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error)
	DestroyVolume(ctx context.Context, id volume.ID) error
	Resize(ctx context.Context, id volume.ID, capacityBytes int64) error
	SetProperties(ctx context.Context, id volume.ID, properties map[string]string) error
	SetMetadata(ctx context.Context, id volume.ID, metadata map[string]string) error
	Capacity(ctx context.Context) (ports.PoolCapacity, error)
	CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (ports.SnapshotInfo, error)
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
	DestroySnapshot(ctx context.Context, id volume.ID, name string) error
	Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error)
	Receive(ctx context.Context, id volume.ID, stream io.Reader) error
	// DiscardPartial drops what a failed Receive kept to be resumed (a
	// copy's retry starts a new stream).
	DiscardPartial(ctx context.Context, id volume.ID) error
	// UnloadKey closes an encrypted volume at the end of its creation
	// (ports.SnapshotStore.UnloadKey).
	UnloadKey(ctx context.Context, id volume.ID) error
}
