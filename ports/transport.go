package ports

import (
	"context"
	"io"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// Transport carries snapshot streams between nodes.
type Transport interface {
	// Snapshots lists the replication snapshots the peer on node holds of
	// a volume, oldest first. ErrNotFound if it holds no such volume;
	// ErrNotOwned if the dataset there is not Ferry's; ErrUnavailable if
	// the peer does not answer.
	Snapshots(ctx context.Context, node replica.Node, id volume.ID) ([]SnapshotInfo, error)
	// Fetch asks the peer on node for req's stream. The caller must Close
	// it; closing early or cancelling ctx stops the peer's sender.
	// ErrNotFound if the peer lacks the snapshot; ErrNotOwned if the peer
	// refuses a dataset Ferry does not own.
	Fetch(ctx context.Context, node replica.Node, req SendRequest) (io.ReadCloser, error)
}

// SnapshotPeers finds and fetches the snapshots other nodes hold: a
// restore scheduled to a node whose pool lacks its snapshot (CSI
// snapshots), a clone to a node without a copy of its source (replication
// snapshots).
type SnapshotPeers interface {
	// Snapshots is Transport.Snapshots: the replication snapshots the
	// peer on node holds of a volume.
	Snapshots(ctx context.Context, node replica.Node, id volume.ID) ([]SnapshotInfo, error)
	// CSISnapshots lists the CSI snapshots the peer on node holds of a
	// volume, with Transport.Snapshots's errors (none from a peer of a
	// release before them).
	CSISnapshots(ctx context.Context, node replica.Node, id volume.ID) ([]SnapshotInfo, error)
	// Fetch is Transport.Fetch: req.To a CSI snapshot's name in the store
	// (volume.SnapshotRef.StoreName) or a replication snapshot's, sent
	// whole (no From, no token).
	Fetch(ctx context.Context, node replica.Node, req SendRequest) (io.ReadCloser, error)
}
