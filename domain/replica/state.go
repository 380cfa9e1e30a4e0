package replica

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ferry-csi/ferry/domain/volume"
)

// Node names a Kubernetes node (and so the replica that lives on it).
type Node string

// Epoch counts primaries: it grows by one each time a replica becomes the
// active primary. A snapshot records the epoch it was taken in, so a replica
// holding snapshots from an older epoch after the common base knows it has
// diverged. At most one replica is active in a given epoch.
type Epoch uint64

// SnapshotNumber numbers a volume's replication snapshots, monotonically.
// 0 means "no data".
type SnapshotNumber uint64

// snapshotPrefix names replication snapshots "ferry-<n>" in each dataset.
const snapshotPrefix = "ferry-"

// SnapshotName is the store name of replication snapshot n.
func SnapshotName(n SnapshotNumber) string { return snapshotPrefix + strconv.FormatUint(uint64(n), 10) }

// ParseSnapshotName returns the number of a replication snapshot name, and
// false for any other snapshot (CSI snapshots, foreign ones).
func ParseSnapshotName(s string) (SnapshotNumber, bool) {
	digits, ok := strings.CutPrefix(s, snapshotPrefix)
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	return SnapshotNumber(n), true
}

// Replica is one node's copy of a volume as recorded in the shared state.
type Replica struct {
	Node Node
	// Snapshot is the newest complete replication snapshot the replica holds.
	Snapshot SnapshotNumber
	// SnapshotEpoch is the epoch Snapshot was taken in.
	SnapshotEpoch Epoch
	// SnapshotGUID identifies Snapshot's contents: two replicas at the same
	// number and epoch with different GUIDs have diverged.
	SnapshotGUID uint64
	// Active is true for the primary while it is mounted read/write.
	Active bool
	// Ready is true once Snapshot is within the allowed lag of the newest.
	Ready bool
}

// State is a volume's shared replica state.
type State struct {
	Volume            volume.ID
	ReplicationFactor int
	// Epoch is the epoch of the current (or last) primary.
	Epoch Epoch
	// Primary is the node of the current primary, "" when none.
	Primary Node
	// Replicas has at most one entry per node, kept sorted by node.
	Replicas []Replica
	// Version is the store's version of this state (a resourceVersion in
	// Kubernetes). It is set by ClusterState and only compared, never made up.
	Version string
}

// Replica returns the entry for node, if any.
func (s *State) Replica(n Node) (Replica, bool) {
	for _, r := range s.Replicas {
		if r.Node == n {
			return r, true
		}
	}
	return Replica{}, false
}

// Newest is the highest snapshot number any replica holds.
func (s *State) Newest() SnapshotNumber {
	var n SnapshotNumber
	for _, r := range s.Replicas {
		n = max(n, r.Snapshot)
	}
	return n
}

// Validate checks the invariants every stored state must hold.
func (s *State) Validate() error {
	if s.ReplicationFactor < 1 {
		return fmt.Errorf("replicationFactor %d: at least 1 is required", s.ReplicationFactor)
	}
	active := 0
	for i, r := range s.Replicas {
		if r.Node == "" {
			return fmt.Errorf("replica %d has no node", i)
		}
		if i > 0 && s.Replicas[i-1].Node >= r.Node {
			return fmt.Errorf("replicas not sorted or duplicated at node %q", r.Node)
		}
		if r.Active {
			active++
			if r.Node != s.Primary {
				return fmt.Errorf("replica on %q is active but the primary is %q", r.Node, s.Primary)
			}
		}
		if r.SnapshotEpoch > s.Epoch {
			return fmt.Errorf("replica on %q has a snapshot from epoch %d, after the volume's epoch %d", r.Node, r.SnapshotEpoch, s.Epoch)
		}
	}
	if active > 1 {
		return fmt.Errorf("%d active replicas: at most one primary may be active", active)
	}
	return nil
}
