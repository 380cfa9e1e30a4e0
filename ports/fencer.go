package ports

import "context"

// Fencer stops a volume's writers on this node: the daemon's fence when
// its node's lease ran out (domain/liveness). On zfs-fuse neither
// readonly=on nor a forced unmount stops a process that holds a file open
// through a pod's bind mount, so the writers themselves are stopped, and
// only then the mounts removed.
type Fencer interface {
	// Fence kills every process that holds a file descriptor, working
	// directory, root or memory mapping on the filesystem mounted at any
	// of points (a volume's own mountpoint and its bind mounts, as the
	// mount table lists them), scanning again until a scan finds none,
	// then unmounts every point except keep (the volume's own
	// mountpoint) and covers each with an empty read-only placeholder
	// (source FencedMountSource): a container the kubelet restarts there
	// finds nothing it can write, and the unpublish removes it. It never
	// stops its own process or pid 1. Nothing to stop and nothing mounted
	// is success: Fence is idempotent. It returns the processes it
	// stopped.
	Fence(ctx context.Context, points []string, keep string) ([]StoppedProcess, error)
}

// StoppedProcess is a process a fence killed.
type StoppedProcess struct {
	PID     int
	Command string // its command name (/proc/PID/comm)
}

// FencedMountSource is the source of the placeholder a fence leaves at a
// pod's target: NodeUnpublishVolume removes it like the volume's own mount.
const FencedMountSource = "ferry-fenced"
