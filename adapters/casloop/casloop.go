// Package casloop is the optimistic compare-and-swap loop every
// ports.ClusterState adapter runs for Update: read the newest state, run
// the caller's pure function on a copy without holding anything, write the
// result only if the version read is still current, else start over, up to
// MaxAttempts (then ports.ErrConflict). The in-memory (fakecluster), file
// (filecluster) and Kubernetes (kube/rvstate) adapters differ only in how
// they read and how they compare-and-swap.
package casloop

import (
	"context"
	"fmt"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// MaxAttempts bounds the loop: past it, Update gives up with ErrConflict
// rather than spin under endless contention.
const MaxAttempts = 16

// Swap writes next if the stored version is still expected; ok is false
// when another writer got there first. It validates next (ErrInvalid) after
// the compare, so that a result made invalid only by a stale read is
// retried on fresh data instead of refused.
type Swap func(expected string, next replica.State) (written replica.State, ok bool, err error)

// Update runs the loop; get must honour ctx (it is where a cancelled
// context stops the loop). fn's errors are returned as they are: callers
// match their own.
func Update(ctx context.Context, id volume.ID, get func(context.Context, volume.ID) (replica.State, error),
	swap Swap, fn func(*replica.State) error) (replica.State, error) {
	for range MaxAttempts {
		read, err := get(ctx, id)
		if err != nil {
			return replica.State{}, err
		}
		next := Clone(read)
		if err := fn(&next); err != nil {
			return replica.State{}, err
		}
		if next.Volume != id {
			return replica.State{}, fmt.Errorf("update cluster state of volume %s: fn renamed it to %q: %w", id, next.Volume, ports.ErrInvalid)
		}
		if next.ReplicationFactor != read.ReplicationFactor {
			return replica.State{}, fmt.Errorf("update cluster state of volume %s: fn changed the replication factor from %d to %d; it is the volume's spec, changed only by editing it: %w",
				id, read.ReplicationFactor, next.ReplicationFactor, ports.ErrInvalid)
		}
		if next.Deleting != read.Deleting {
			return replica.State{}, fmt.Errorf("update cluster state of volume %s: fn changed whether the volume is being deleted; only Delete does: %w", id, ports.ErrInvalid)
		}
		written, ok, err := swap(read.Version, next)
		if err != nil || ok {
			return written, err
		}
	}
	return replica.State{}, fmt.Errorf("update cluster state of volume %s: gave up after %d attempts: %w", id, MaxAttempts, ports.ErrConflict)
}

// Removes reports whether writing next removes the state instead: the
// volume is being deleted and its last replica left (ports.ClusterState).
func Removes(next replica.State) bool { return next.Deleting && len(next.Replicas) == 0 }

// Clone copies a state deeply enough that changing the copy never changes
// the original (the replica list is the only reference it holds).
func Clone(st replica.State) replica.State {
	st.Replicas = append([]replica.Replica(nil), st.Replicas...)
	return st
}
