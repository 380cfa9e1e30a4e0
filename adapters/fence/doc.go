// Package fence implements ports.Fencer and ports.HolderStopper on Linux.
// Fence, the daemon's, stops (SIGKILL) the processes that could still
// write a volume through this node's mounts, then removes the pods' mounts
// of it and covers each with an empty read-only placeholder. StopHolders,
// a volume manager's watchdog's, stops the same processes with SIGSTOP and
// changes no mount.
//
// A process is a writer of a filesystem when its working directory, root,
// executable, any open descriptor or any file mapping lies on it, as
// found through /proc/PID/{cwd,root,exe,fd/*,map_files/*}. The kernel
// follows those links into the process's own mount namespace, so a
// container's processes are found too; they are compared by device
// number (st_dev), which a bind mount shares with its source. The
// executable counts although it is not opened for writing: a program run
// from the volume is part of the pod that writes it, and its text mapping
// would keep the mount busy anyway.
//
// The adapter decides nothing: the daemon's failover Guard (or the
// watchdog, replication.Watchdog) says when, and the mount table which
// points. It needs the host's pid namespace to see
// the pods' processes (hostPID), and refuses to signal anything when the
// proc filesystem it reads belongs to another pid namespace.
package fence
