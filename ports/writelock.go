package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
)

// WriteLock makes a volume's filesystem refuse writes on every mount of
// it, in every mount namespace of the node, without touching a mount:
// what a volume manager's watchdog, whose mount namespace is not the
// node's, can do to its volume when the node's daemon is down (ZFS:
// readonly=on; OpenZFS refuses every write then, through files already
// open included; zfs-fuse refuses new files and truncations, but lets a
// file open before, or opened for appending, be written: there the
// watchdog also stops the holders, HolderStopper). The lock is recorded
// on the volume (MetaWritesLocked, read back by GetVolume), so that
// whoever makes the volume writable again (the daemon giving a fenced
// primary its pods back, a read/write publish) knows to lift it. Both are
// idempotent; a volume that does not exist is ErrNotFound.
type WriteLock interface {
	LockWrites(ctx context.Context, id volume.ID, reason string) error
	UnlockWrites(ctx context.Context, id volume.ID) error
}

// HolderStopper stops the processes holding a volume's filesystem and
// changes no mount: the watchdog's part of a fence, after its WriteLock
// (Fencer, the daemon's, kills them and also unmounts and covers the pods'
// targets, which only a process in the node's mount namespace can do).
type HolderStopper interface {
	// StopHolders stops (SIGSTOP) every process that holds a file
	// descriptor, working directory, root or memory mapping on a
	// filesystem mounted at any of points (as this process's mount table
	// shows it; every mount of a filesystem shares its device, whatever
	// the namespace), scanning again until a scan finds none still
	// running. Stopped, not killed: the kubelet restarts a container whose
	// process was killed, and on zfs-fuse the new one could append to the
	// read-only dataset; a stopped one stays, writing nothing, until the
	// daemon's fence kills it or its pod is restarted. It never stops its
	// own process or pid 1. Nothing mounted, or nothing holding it, is
	// success. It returns the processes it stopped.
	StopHolders(ctx context.Context, points []string) ([]StoppedProcess, error)
}
