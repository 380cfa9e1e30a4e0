package replication

import (
	"context"
	"io"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is what a volume manager needs of its node's pool: the copy,
// its snapshots and the streams between copies (ports.SnapshotStore is
// the whole contract its adapters keep).
type Store interface {
	GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error)
	Resize(ctx context.Context, id volume.ID, capacityBytes int64) error
	SetProperties(ctx context.Context, id volume.ID, properties map[string]string) error
	DestroyVolume(ctx context.Context, id volume.ID) error
	Unchanged(ctx context.Context, id volume.ID) (bool, error)
	CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (ports.SnapshotInfo, error)
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
	DestroySnapshot(ctx context.Context, id volume.ID, name string) error
	Rollback(ctx context.Context, id volume.ID, name string) error
	KeepAside(ctx context.Context, id volume.ID, name string) (ports.KeptCopy, error)
	ResumeToken(ctx context.Context, id volume.ID) (string, error)
	DiscardPartial(ctx context.Context, id volume.ID) error
	Receive(ctx context.Context, id volume.ID, stream io.Reader) error
	ReceiveReplacement(ctx context.Context, id volume.ID, stream io.Reader, commit func(context.Context) error) error
}

// SharedState is the volume's shared replication state as a volume
// manager reads, changes and watches it (ports.ClusterState and
// ports.StateWatcher). A store that cannot watch answers Watch with an
// error: the volume manager then reads the state every tick.
type SharedState interface {
	Get(ctx context.Context, id volume.ID) (replica.State, error)
	Create(ctx context.Context, s replica.State) (replica.State, error)
	Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error)
	Delete(ctx context.Context, id volume.ID) error
	Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error)
}
