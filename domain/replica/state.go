package replica

import (
	"fmt"
	"strconv"
	"strings"
	"time"

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

// snapshotPrefix names replication snapshots "ferry-<epoch>-<n>" in each
// dataset. The epoch is part of the name so that it travels with the
// snapshot atomically: a received snapshot can never exist without it (a
// property set after the receive is lost when the receiver stops in
// between, and a snapshot of unknown epoch would sort below older ones).
const snapshotPrefix = "ferry-"

// SnapshotName is the store name of replication snapshot s:
// "ferry-<epoch>-<number>".
func SnapshotName(s Snap) string {
	return snapshotPrefix + strconv.FormatUint(uint64(s.Epoch), 10) + "-" + strconv.FormatUint(uint64(s.Number), 10)
}

// ParseSnapshotName returns the number and epoch of a replication snapshot
// name, and false for any other snapshot (CSI snapshots, foreign ones).
// Both parts are canonical decimal numbers of at least 1: there is exactly
// one name per snapshot, so a lookalike can never alias one.
func ParseSnapshotName(s string) (SnapshotNumber, Epoch, bool) {
	rest, ok := strings.CutPrefix(s, snapshotPrefix)
	if !ok {
		return 0, 0, false
	}
	e, n, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	epoch, ok1 := canonical(e)
	num, ok2 := canonical(n)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	return SnapshotNumber(num), Epoch(epoch), true
}

// canonical parses a decimal number >= 1 without sign or leading zeros.
func canonical(d string) (uint64, bool) {
	if d == "" || d[0] == '0' {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(d, 10, 64)
	return v, err == nil
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
	// Fetching is the snapshot the replica is receiving (Number 0: none),
	// recorded by compare-and-swap before the transfer starts and cleared
	// when the replica reports a snapshot at least as new. Every replica's
	// retention keeps it meanwhile: a transfer that lasts many snapshot
	// intervals (a first sync of a large volume) still finds its target at
	// the sender, and a snapshot received but not yet reported is still
	// held elsewhere. It is never counted as a copy: the replica may not
	// hold it yet.
	Fetching Snap
	// Taker says the primary of the current epoch acknowledged this
	// replica as one that may take the volume over (Acknowledge): its
	// node's guard knew it as a taker (and so asks it for a promise when
	// its lease cannot be renewed) before this flag could be written. Only
	// a taker may take over (Takeover), so no view a cut-off primary holds,
	// however stale, can miss a node that takes its volume over. A new
	// epoch (Promote, Takeover) clears every flag: the new primary
	// acknowledges its own takers.
	Taker bool
	// Resumed counts the times this replica, as the active primary,
	// resumed writing after its node's fence or loss of contact (a pod
	// given back, or published anew: Resume). A survivor that judged the
	// node lost takes over only if the counter has not moved since a state
	// it read before that judgement (liveness.ResumedSince): a primary
	// that resumed in between wins, and no pod writes on both sides.
	Resumed uint64
	// Forked is set (Epoch != 0) on a primary a takeover replaced: its
	// copy may hold writes the volume gave up (snapshots of its ended
	// term the successor never received, or writes never snapshotted on
	// top of the snapshot they share). See OnFencedBranch.
	Forked Fork
	// SnapshotTaken is when Snapshot was taken, in Unix seconds, as the
	// replica's store says (0: not said). For operators only (the age of
	// the newest snapshot in `kubectl get rv`): nothing is decided on it.
	SnapshotTaken int64
}

// Fork is where a takeover made the volume's history leave a replica's
// copy: Epoch is the takeover's epoch, At the successor's snapshot then
// (the last one the two copies may share).
type Fork struct {
	Epoch Epoch
	At    Snap
}

// OnFencedBranch reports whether r's copy may hold writes the volume gave
// up: it was the primary a takeover of epoch Forked.Epoch replaced, and it
// has not reported a snapshot of that epoch or later since (it receives
// one only after rolling back to a snapshot of the volume's line, or being
// replaced; a replica holding nothing reported has nothing to give back).
// Such a copy is never ready, never promoted nor a successor, and its
// snapshot is never counted as newer than another replica's: its newest
// snapshot may equal the fork point while its dataset holds the fenced
// writes on top of it.
func (r Replica) OnFencedBranch() bool {
	return r.Forked.Epoch != 0 && r.Snapshot != 0 && r.SnapshotEpoch < r.Forked.Epoch
}

// Holds is the replica's newest snapshot as the list records it.
func (r Replica) Holds() Snap {
	return Snap{Number: r.Snapshot, Epoch: r.SnapshotEpoch, GUID: r.SnapshotGUID}
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
	// Deleting says the volume is being deleted (Kubernetes: its
	// ReplicatedVolume has a deletionTimestamp, held by a finalizer): every
	// replica destroys its copy and then leaves the list, and the state
	// goes with the last entry, so no copy outlives the volume unseen. Like
	// ReplicationFactor it is not the replicas' to write: only
	// ClusterState.Delete sets it.
	Deleting bool
	// SnapshotInterval is how often the primary snapshots, as the volume's
	// spec says (an operator may edit it there); 0: the volume manager's
	// own setting. Like ReplicationFactor it is not the replicas' to write.
	SnapshotInterval time.Duration
	// CapacityBytes is the volume's size, as its spec says (an expansion
	// records the new size there): every copy is this size, a quota and a
	// reservation (Grow). 0: not known (a state made before it was
	// recorded). Like ReplicationFactor it is not the replicas' to write.
	CapacityBytes int64
	// Properties are the native properties every copy holds (compression,
	// recordsize, atime: volume.Params.Properties, normalised), as the
	// volume's spec says: a copy made by a full receive has its pool's
	// defaults instead (Conform). nil: none recorded (a state made before
	// they were, or rebuilt from the copies). Like ReplicationFactor they
	// are not the replicas' to write.
	Properties map[string]string
	// Awaiting, on a state rebuilt from the copies after its object was
	// lost (Rediscover), names the nodes whose pools may hold a copy and
	// have not answered yet (Answer), sorted. While any is awaited no
	// replica is promoted, transfers, rolls back, discards or leaves: the
	// newest copy may be on a node not heard from yet. A node gone for
	// good is given up (Forget).
	Awaiting []Node
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
		if r.Taker && r.Node == s.Primary {
			return fmt.Errorf("replica on %q is the primary and a taker of its own term", r.Node)
		}
		if r.Active {
			active++
			if r.Node != s.Primary {
				return fmt.Errorf("replica on %q is active but the primary is %q", r.Node, s.Primary)
			}
		}
		if r.SnapshotEpoch > s.Epoch || r.Fetching.Epoch > s.Epoch {
			return fmt.Errorf("replica on %q names a snapshot from an epoch after the volume's epoch %d", r.Node, s.Epoch)
		}
		if (r.Snapshot == 0) != (r.SnapshotEpoch == 0) || (r.Fetching.Number == 0) != (r.Fetching.Epoch == 0) {
			return fmt.Errorf("replica on %q names a snapshot without its epoch, or an epoch without a snapshot", r.Node)
		}
		if f := r.Forked; f.Epoch > s.Epoch || (f.Epoch == 0) != (f.At.Number == 0) || (f.At.Number == 0) != (f.At.Epoch == 0) || (f.Epoch != 0 && f.At.Epoch >= f.Epoch) {
			return fmt.Errorf("replica on %q names a fork of epoch %d at snapshot %d of epoch %d: not a takeover of this volume's", r.Node, f.Epoch, f.At.Number, f.At.Epoch)
		}
		if r.OnFencedBranch() && (r.Active || r.Ready) {
			return fmt.Errorf("replica on %q is on a fenced branch (forked at epoch %d) and cannot be active or ready", r.Node, r.Forked.Epoch)
		}
	}
	if active > 1 {
		return fmt.Errorf("%d active replicas: at most one primary may be active", active)
	}
	for i, n := range s.Awaiting {
		if n == "" || (i > 0 && s.Awaiting[i-1] >= n) {
			return fmt.Errorf("awaited nodes not sorted, duplicated or empty at %q", n)
		}
	}
	if len(s.Awaiting) > 0 && active > 0 {
		return fmt.Errorf("a rebuilt state awaiting %v has an active primary", s.Awaiting)
	}
	return nil
}
