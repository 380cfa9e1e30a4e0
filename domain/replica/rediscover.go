package replica

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/ferry-csi/ferry/domain/volume"
)

// Rediscovery: a volume's shared state (its ReplicatedVolume) was lost
// (deleted by hand, with its CRD) while copies remain in the nodes'
// pools. The daemons rebuild it from the copies, and the copy that
// becomes primary must be the newest of them all, not the first found.
//
// The first daemon to find a copy with no state creates one (Rediscover):
// its copy listed with what it holds, no primary, and every node that may
// hold a copy awaited. Each awaited node answers (Answer): its copy listed
// with what it holds, or that it holds none. Until the last answer no
// replica is promoted, transfers, rolls back, discards or leaves; after
// it, the state is an ordinary one without an active primary, and the
// first read/write publish catches up to the newest listed copy before it
// is promoted (Promote refuses a replica behind another). A node gone for
// good is given up by an operator (Forget: the Node object deleted).
//
// The rebuilt state starts a new era of epochs (EraAfter): a copy not
// heard from before the survey ended (a node given up that comes back)
// may hold snapshots of any epoch of the lost state; every epoch of the
// new era is above them, so such a copy is an older line (on a fenced
// branch, kept aside before anything of it is discarded), never taken for
// one of the new primaries' snapshots.

// eraBits is the width of an era's epochs.
const eraBits = 32

// EraAfter is the first epoch of the era after e's.
func EraAfter(e Epoch) Epoch { return (e>>eraBits + 1) << eraBits }

// Rediscover returns the state of volume id rebuilt by node from its own
// copy (holds: its newest replication snapshot), awaiting the other nodes
// that may hold one. rf is the volume's replication factor (recorded with
// the copy at creation).
func Rediscover(id volume.ID, rf int, node Node, holds Snap, nodes []Node) (State, error) {
	if rf < 1 {
		return State{}, fmt.Errorf("rediscover %s: replication factor %d", id, rf)
	}
	if holds.Number == 0 || holds.Epoch == 0 {
		return State{}, fmt.Errorf("rediscover %s: the copy on %s holds no replication snapshot: nothing says it was a replica", id, node)
	}
	s := State{Volume: id, ReplicationFactor: rf, Epoch: EraAfter(holds.Epoch),
		Replicas: []Replica{{Node: node, Snapshot: holds.Number, SnapshotEpoch: holds.Epoch, SnapshotGUID: holds.GUID}}}
	for _, n := range nodes {
		if n != node && n != "" && !slices.Contains(s.Awaiting, n) {
			s.Awaiting = append(s.Awaiting, n)
		}
	}
	slices.Sort(s.Awaiting)
	return s, s.Validate()
}

// RediscoveryFactor is the replication factor of a rebuilt state, from
// what the copy recorded at its creation (has: a factor was recorded):
// the recorded one when it is 2 or more, 2 when none was (a secondary's
// copy, made by a receive, records none: 2 is the least a replicated
// volume has, and an operator may raise it), none for a plain volume
// (false: factor 1, or unreadable: nothing to rebuild).
func RediscoveryFactor(recorded string, has bool) (int, bool) {
	if !has {
		return 2, true
	}
	n, err := strconv.Atoi(recorded)
	if err != nil || n < 2 {
		return 0, false
	}
	return n, true
}

// Answer records node's answer to a rebuilt state's survey: the newest
// replication snapshot its copy holds (hasCopy), or that it holds none;
// node is no longer awaited. A copy holding a snapshot of an epoch the
// state has not reached yet raises the state's era above it, which no
// promotion can have used while any node was awaited. An answer from a
// node not awaited (late, or given up) lists its copy like any joining
// replica's report.
func Answer(s *State, node Node, hasCopy bool, holds Snap) error {
	awaited := slices.Contains(s.Awaiting, node)
	s.Awaiting = slices.DeleteFunc(s.Awaiting, func(n Node) bool { return n == node })
	if !hasCopy || holds.Number == 0 {
		return nil
	}
	if holds.Epoch >= s.Epoch {
		if !awaited || s.Primary != "" {
			return fmt.Errorf("answer from %s: snapshot %d of epoch %d is not before the volume's epoch %d", node, holds.Number, holds.Epoch, s.Epoch)
		}
		s.Epoch = EraAfter(holds.Epoch)
	}
	Join(s, node)
	if r, _ := s.Replica(node); r.Snapshot != 0 {
		return nil // listed already: its own reports say what it holds
	}
	return Report(s, node, holds, false)
}

// Forget gives up an awaited node: an operator said it is gone for good
// (its Node object deleted). What its copy held is lost to the volume if
// it was the newest; if it comes back, its copy is an older line.
func Forget(s *State, node Node) {
	s.Awaiting = slices.DeleteFunc(s.Awaiting, func(n Node) bool { return n == node })
}
