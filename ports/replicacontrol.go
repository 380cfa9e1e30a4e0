package ports

import (
	"context"
	"errors"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
)

// ReplicaControl is the node plugin's line to the volume managers on its
// own node (Kubernetes: a unix socket per volume in a directory both
// mount; no network hop). Publish and unpublish go through it, so that
// the one goroutine that steps a replica's machine makes every decision.
type ReplicaControl interface {
	// Acquire asks the node's volume manager of id to become the volume's
	// single active primary and waits up to wait for it (a read/write
	// publish). ErrNotFound: no volume manager of id runs on this node.
	// ErrNotPrimary (wrapped, with what it waits for) when wait passed
	// first: the volume manager then stopped acquiring.
	Acquire(ctx context.Context, id volume.ID, wait time.Duration) error
	// Release asks it to end its term if it is the active primary (a
	// final snapshot recorded with the demotion) and waits until done; nil
	// at once when it is not the primary. ErrNotFound: none runs here.
	Release(ctx context.Context, id volume.ID, wait time.Duration) error
}

// ErrNotPrimary: a replica did not become (or stop being) the active
// primary in the time given; the caller may ask again later.
var ErrNotPrimary = errors.New("not the active primary yet")
