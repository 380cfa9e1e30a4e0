package ports

import (
	"errors"
	"time"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/volume"
)

// PermitPublisher keeps the node's write permit (liveness.Permit: until
// when each primary here may write) where the volume managers on this
// node read it and where it outlives the daemon's process (Kubernetes: a
// file in the host directory the daemon and the replica pods share). The
// daemon's guard publishes it; a volume manager whose daemon is down
// fences on it alone (liveness.Watch).
type PermitPublisher interface {
	// Publish replaces the node's permit. Its instants are on the
	// caller's clock, read by now; they are stored as instants of a clock
	// of the node that every process there shares and that counts time
	// asleep, that clock read before now, so that no deadline stored is
	// later than the caller's. liveness.Forever stays Forever.
	Publish(p liveness.Permit, now func() time.Duration) error
}

// PermitReader reads the node's write permit.
type PermitReader interface {
	// Read returns the permit last published on this node since it
	// booted, its instants and now on the node's clock (now read after
	// the permit). ErrNotFound when there is none: never published, or
	// published before the node last booted (its instants mean nothing
	// now); ErrPermitVersion when the one there is in a format this
	// reader does not understand (a newer daemon's).
	Read() (p liveness.Permit, now time.Duration, err error)
}

// ErrPermitVersion: the node's write permit is in a version the reader
// does not understand.
var ErrPermitVersion = errors.New("write permit of an unknown version")

// FenceRecords note the volumes a volume manager's watchdog fenced on its
// own, where the node's daemon finds them: the fence leaves the pods on
// an empty read-only placeholder, and the daemon's guard gives them their
// volume back once the primary here may write again (as it does for its
// own fences). Records of an earlier boot are dropped: no placeholder
// outlives a reboot.
type FenceRecords interface {
	// Record notes volume id as fenced here, and why.
	Record(id volume.ID, reason string) error
	// Recorded lists the volumes noted on this node since it booted, with
	// their reasons.
	Recorded() (map[volume.ID]string, error)
	// Clear removes id's note if it still gives reason (a note written
	// since, by a later fence, stays); none is no error.
	Clear(id volume.ID, reason string) error
}
