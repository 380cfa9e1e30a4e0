package volume

import (
	"fmt"
	"sort"
)

// Use is what is known about where a volume is in use when deciding
// whether it may be deleted. It gathers both sources of that knowledge:
//
//   - Mounts: the node's mount table. The controller runs on the node
//     that holds the volume (the daemon's --serve-controller, csi-sanity,
//     the demo) and reads which mounts have the volume's filesystem as
//     their source.
//   - ActivePrimary: the replica state's active primary (replica.State's
//     Primary while its Replica is Active), so that a volume published on
//     another node is known to be in use too. DeleteVolume does not fill
//     it yet (ARCHITECTURE.md 5.4).
type Use struct {
	// Mounts are the mount points showing the volume's filesystem other
	// than its own mountpoint: the pods' bind mounts.
	Mounts []string
	// ActivePrimary is the node whose replica is the active primary, empty
	// when no replica is active or the state is not known.
	ActivePrimary string
}

// DeleteBlock says why a volume may not be deleted; a closed enum.
type DeleteBlock int

const (
	// DeleteAllowed: nothing shows the volume in use.
	DeleteAllowed DeleteBlock = iota
	// DeleteBlockedMounted: a pod's mount shows the volume's filesystem.
	DeleteBlockedMounted
	// DeleteBlockedActivePrimary: a replica is the active primary, so the
	// volume is published on that node.
	DeleteBlockedActivePrimary
)

// DeleteVerdict is MayDelete's answer with its evidence.
type DeleteVerdict struct {
	Block DeleteBlock
	// Evidence names what blocks: the first mount point (sorted), or the
	// active primary's node.
	Evidence string
}

// Allowed reports whether the volume may be deleted.
func (v DeleteVerdict) Allowed() bool { return v.Block == DeleteAllowed }

func (v DeleteVerdict) String() string {
	switch v.Block {
	case DeleteAllowed:
		return "not in use"
	case DeleteBlockedMounted:
		return fmt.Sprintf("published: mounted at %s", v.Evidence)
	case DeleteBlockedActivePrimary:
		return fmt.Sprintf("published: node %s holds the active primary", v.Evidence)
	}
	return fmt.Sprintf("DeleteBlock(%d)", int(v.Block))
}

// MayDelete is the rule "a volume in use is never deleted": a volume that
// any source shows published (mounted for a pod on this node, or held by
// an active primary anywhere) may not be deleted; deleting it would pull
// the data from under a running pod. A mount is the stronger evidence and
// is reported first.
func MayDelete(u Use) DeleteVerdict {
	if len(u.Mounts) > 0 {
		m := append([]string(nil), u.Mounts...)
		sort.Strings(m)
		return DeleteVerdict{Block: DeleteBlockedMounted, Evidence: m[0]}
	}
	if u.ActivePrimary != "" {
		return DeleteVerdict{Block: DeleteBlockedActivePrimary, Evidence: u.ActivePrimary}
	}
	return DeleteVerdict{Block: DeleteAllowed}
}
