package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// ClusterState keeps each volume's shared replica state where every node
// sees it (a custom resource in Kubernetes; in memory for tests). PV
// spec.csi is immutable, so it cannot live there.
type ClusterState interface {
	// Get returns the volume's state; ErrNotFound if there is none.
	Get(ctx context.Context, id volume.ID) (replica.State, error)
	// Create stores the first state of a volume; ErrExists if one exists.
	Create(ctx context.Context, s replica.State) (replica.State, error)
	// Update reads the newest state, applies fn and writes the result only
	// if no one wrote in between (compare-and-swap on State.Version); on a
	// conflict it re-reads and runs fn again, up to a bounded number of
	// times, then returns ErrConflict. fn must be a pure function of its
	// argument: it may run several times. An error from fn aborts without
	// writing and is returned as is. The written state is returned.
	Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error)
	// Delete removes the state; ErrNotFound if absent.
	Delete(ctx context.Context, id volume.ID) error
}
