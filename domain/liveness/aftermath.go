package liveness

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// The survivor's verdicts: what a node does, once another is lost, before
// and after it takes a volume over (Takeovers says which). The survivor
// (app/failover.Survivor) reads the leases and the states, calls these,
// and carries out what they say:
//
//   - FenceNodeFirst: whether the lost node is fenced from outside (the
//     configured node fence) before the takeover;
//   - ApplyTakeover: the takeover itself, inside the compare-and-swap, and
//     TakeoverRefused: whether a failed one was refused by the fresh state
//     (nothing to retry) rather than failed;
//   - AftermathOf, OwedOnLoss and Aftermath.Steps: what the lost node still
//     owes for the volume (its placement label gone, the node tainted, its
//     replica pods and then its pods using the volume deleted), whoever
//     took over and whenever.

// FenceNodeFirst says whether the survivor fences t's lost node from
// outside before taking the volume over: only where a node fence is
// configured, only from an active primary (a released volume has no
// writer to fence), and once per loss (fenced: already since the loss).
func FenceNodeFirst(t Takeover, configured, fenced bool) bool {
	return configured && !t.Released && !fenced
}

// GivenUp names what a takeover of a released volume gave up: the final
// snapshot the lost node's release recorded (and every one after From),
// and the successor's snapshot the volume goes on from.
type GivenUp struct {
	Final, From replica.Snap
}

// ApplyTakeover is the survivor's takeover t, to run inside the
// compare-and-swap on the volume's fresh state st; before is the state
// as the survivor's view showed it before the lease read that judged
// t.Lost lost. It is refused (replica.ErrStaleView) when the lost primary
// resumed writing since (ResumedSince: its pods given back or published
// anew); else an active primary is taken over (replica.Takeover), a
// released one too (replica.TakeoverReleased), naming what it gave up.
func ApplyTakeover(st *replica.State, before replica.State, t Takeover, self replica.Node, lag uint64) (GivenUp, error) {
	if ResumedSince(before, *st, t.Lost) {
		return GivenUp{}, fmt.Errorf("takeover from %s: it resumed writing after the lease verdict (its pods given back or published anew): %w", t.Lost, replica.ErrStaleView)
	}
	if !t.Released {
		return GivenUp{}, replica.Takeover(st, self, t.Lost, lag)
	}
	r, _ := st.Replica(self)
	from := r.Holds()
	final, err := replica.TakeoverReleased(st, self, t.Lost, lag)
	return GivenUp{Final: final, From: from}, err
}

// TakeoverRefused says whether a takeover that failed was refused by the
// fresh state (another survivor won, this node is not a taker or is
// behind, the lost primary resumed): the compare-and-swap is the arbiter,
// and nothing is retried. Any other error is retried at the next period.
func TakeoverRefused(err error) bool {
	return errors.Is(err, replica.ErrFenced) || errors.Is(err, replica.ErrBehind) ||
		errors.Is(err, replica.ErrNotTaker) || errors.Is(err, replica.ErrStaleView)
}

// Aftermath is what a takeover owes on the lost node for one volume, each
// value owing more than the one before.
type Aftermath int

const (
	// NothingOwed: nothing.
	NothingOwed Aftermath = iota
	// UnplaceOnly: the lost node's placement label of the volume goes (a
	// released volume taken over: no pod of it runs there, none is
	// recreated, and a taint would stay until the volume is published
	// again, its copy there resyncing only then).
	UnplaceOnly
	// UnplaceTaintEvict: the placement label goes, the node is tainted,
	// its replica pods of the volume and then its pods using the volume
	// are deleted (an active primary taken over: its pods are recreated
	// elsewhere), in that order: a pod recreated at once must not land on
	// the node again (the volume's PersistentVolume keeps the node it was
	// provisioned on as a term of its node affinity, so only the taint
	// keeps the scheduler off it). Also owed, by the active primary's
	// daemon, for a lost node holding a secondary (OwedOnLoss).
	UnplaceTaintEvict
)

// AftermathStep is one effect on a lost node.
type AftermathStep int

const (
	// Unplace: remove the node's placement label of the volume.
	Unplace AftermathStep = iota + 1
	// TaintNode: taint the node fenced (NoSchedule).
	TaintNode
	// EvictPods: force-delete the node's pods using the volume that a
	// controller owns.
	EvictPods
	// RemoveReplicaPods: force-delete the node's replica pods of the
	// volume, in its ReplicaSet or outside it (the volume manager of a
	// primary whose term was taken over). Before EvictPods: see Steps.
	RemoveReplicaPods
)

// Steps are a's effects in the order they are carried out; each is
// idempotent, and a failed one stops the rest until the next attempt.
//
// After a takeover the lost node keeps no replica pod of the volume. The
// API server keeps a pod whose kubelet cannot confirm its end (about five
// minutes, until the node controller evicts it, or until the node
// returns), and until then the volume's workload counts it: its
// ReplicaSet as one of its secondaries running, the primary's sizer
// (placement.DesiredAround) as a pod outside the ReplicaSet when it is an
// ended term's primary's. Counted, it holds a place no copy fills: the
// sizer shrinks the ReplicaSet below the copies live nodes run, the
// ReplicaSet controller deletes the newest pod, a live node's (it ranks
// pods by their own readiness and age, never by their node's), and that
// node's adoption starts it again, at every placement period. Deleted, it
// is replaced by the ReplicaSet where the scheduler finds room, and the
// lost node's copy, back, is adopted like any copy without a pod: it
// leaves when surplus (placement.Adopt; a fenced term's writes kept aside
// first) or gets its pod again. The replica pods go before the pods using
// the volume: those are recreated on the new primary's node, whose
// publish sizes the workload, which must not count the lost node's
// anymore by then.
func (a Aftermath) Steps() []AftermathStep {
	switch a {
	case UnplaceOnly:
		return []AftermathStep{Unplace}
	case UnplaceTaintEvict:
		return []AftermathStep{Unplace, TaintNode, RemoveReplicaPods, EvictPods}
	}
	return nil
}

// With is what is owed when both a and b are: never fewer effects than
// already owed.
func (a Aftermath) With(b Aftermath) Aftermath { return max(a, b) }

// AftermathOf is what takeover t owes on its lost node.
func AftermathOf(t Takeover) Aftermath {
	if t.Released {
		return UnplaceOnly
	}
	return UnplaceTaintEvict
}

// Owed names a lost node that owes a volume's aftermath.
type Owed struct {
	Volume volume.ID
	Node   replica.Node
}

// OwedOnLoss is what the states say is owed, whoever took over and
// whenever (the survivor may have restarted between its compare-and-swap
// and the effects): for every volume whose active primary is self, each
// lost node listed in it owes UnplaceTaintEvict, unless done (carried
// out since that node's loss: once per loss).
func OwedOnLoss(states []replica.State, lost []replica.Node, self replica.Node, done map[Owed]bool) []Owed {
	var out []Owed
	for _, st := range states {
		if r, ok := st.Replica(self); !ok || st.Primary != self || !r.Active {
			continue
		}
		for _, n := range lost {
			if _, listed := st.Replica(n); listed && !done[Owed{st.Volume, n}] {
				out = append(out, Owed{st.Volume, n})
			}
		}
	}
	slices.SortFunc(out, func(a, b Owed) int { return cmp.Or(cmp.Compare(a.Volume, b.Volume), cmp.Compare(a.Node, b.Node)) })
	return out
}
