// Package placement decides, from a volume's replica state, what
// Kubernetes should be told: how many secondaries the volume's ReplicaSet
// should run, how many of them a voluntary disruption (a drain) must leave
// running, on which nodes the volume may be used, whether a node's copy
// found without a pod may join, and which node takes an Immediate claim
// (SelectNode, the same answer on every daemon). The Kubernetes adapters only apply
// these answers (ReplicaSet scale, PodDisruptionBudget minAvailable, node
// labels, pod creation); nothing here knows a Kubernetes type.
//
// Like the replica machine, these are pure functions of the state read:
// each caller re-reads and applies again on every change it watches, so a
// decision made on a stale view is corrected by the next one.
package placement

import (
	"fmt"
	"slices"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Objects is what a volume's Kubernetes objects should say.
type Objects struct {
	// Secondaries is the ReplicaSet's replicas: one pod per copy other than
	// the active primary, which leaves the ReplicaSet while it is active
	// (seed 000), so that the ReplicaSet never deletes it to scale down
	// and the scheduler spreads the others away from it.
	Secondaries int
	// MinAvailable is the PodDisruptionBudget's minAvailable over the
	// secondaries: a drain may take one copy at a time, and never the last
	// copy of the volume (with no active primary holding one, the only
	// secondary is never evicted; the drain waits and says so).
	MinAvailable int
	// UsableOn are the nodes to label usable (the volume's topology
	// segment): the active primary's node alone while one is active, else
	// every ready replica's, sorted. A pod using the volume is scheduled
	// only there.
	UsableOn []replica.Node
}

// Remade is the workload made again for s when it is gone (deleted by
// hand, or lost with a state rebuilt from the copies): Desired with no
// secondary of its own yet. Each listed copy's daemon then raises it by
// its own pinned pod (Adopt), so that the copies that exist run first and
// no new one is made on a node the ReplicaSet would pick; the volume's
// sizer sizes it as Desired once its pods run.
func Remade(s replica.State) Objects {
	o := Desired(s)
	o.Secondaries = 0
	return o
}

// Desired computes the objects for s. While the volume is being deleted
// (s.Deleting) the pods stay (each replica's volume manager destroys its
// copy and leaves the list, retrying until it has; the pods go with the
// volume's object once the last one left), none is protected from a
// drain, and the volume is usable nowhere.
func Desired(s replica.State) Objects { return DesiredAround(s, 0) }

// DesiredAround is Desired when outside of the volume's replica pods run
// outside its ReplicaSet: the active primary's, and a replica's that left
// the ReplicaSet for a publish and is not the primary yet (it leaves
// first, so that the ReplicaSet never deletes it to scale down). The
// ReplicaSet runs the rest of the replication factor, so that a handover
// neither adds a replica nor takes one; the active primary counts as
// outside even while its pod is missing (its daemon starts it outside).
// outside counts pods as the cluster keeps them: a pod on a lost node
// would count as well, which is why a takeover deletes the lost node's
// replica pods first (liveness.Aftermath.Steps).
func DesiredAround(s replica.State, outside int) Objects {
	if s.Deleting {
		o := s
		o.Deleting = false
		d := DesiredAround(o, outside)
		d.MinAvailable, d.UsableOn = 0, nil
		return d
	}
	active := 0
	for _, r := range s.Replicas {
		if r.Active {
			active++
		}
	}
	o := Objects{Secondaries: max(s.ReplicationFactor-max(outside, active), 0)}
	o.MinAvailable = max(o.Secondaries-1, 0)
	if active == 0 && o.Secondaries > 0 {
		o.MinAvailable = max(o.MinAvailable, 1)
	}
	o.UsableOn = UsableOn(s)
	return o
}

// UsableOn is the set of nodes where the volume may be used now, sorted.
// While a primary is active (mounted read/write), only its node: it is
// the one writer, and a pod scheduled anywhere else would write a copy
// that its volume manager must roll back. Otherwise every replica marked
// Ready (within the allowed lag of the newest snapshot, same epoch): a
// replica that is catching up, has diverged or holds nothing yet is not
// usable, since a pod there would wait for it or start on stale data.
// Ready is what each replica's volume manager reported (replica.IsReady).
func UsableOn(s replica.State) []replica.Node {
	if s.Deleting {
		return nil
	}
	var nodes []replica.Node
	for _, r := range s.Replicas {
		if r.Active {
			return []replica.Node{r.Node}
		}
		if r.Ready {
			nodes = append(nodes, r.Node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// Usable reports whether node is one of UsableOn(s).
func Usable(s replica.State, node replica.Node) bool {
	return slices.Contains(UsableOn(s), node)
}

// Adoption is the answer for a copy a node found in its pool with no pod
// running for it (after a daemon or node restart, a drain, an eviction).
type Adoption struct {
	// Leave says to run the safe-deletion protocol for the copy first,
	// where it is, without a pod: the volume is being deleted (the copy
	// goes), or the ReplicaSet already runs every secondary it wants, so
	// the copy is surplus and goes if the safe-deletion rule allows it. A
	// pod started for a surplus copy would be the ReplicaSet's surplus
	// and deleted at once, before its volume manager could leave: the
	// copy would stay listed for ever.
	Leave bool
	// Start says to start a pod for the copy (after Leave, only if the
	// rule kept the copy: it holds data the others need).
	Start bool
	// RaiseTo, when above the ReplicaSet's current replicas, is the scale
	// to set before the pod is created: a ReplicaSet adopts a matching pod
	// and deletes its surplus at once, possibly this one.
	RaiseTo int
	Reason  string
}

// Adopt decides for the copy on node. current is the ReplicaSet's replicas
// now and running the number of its pods that exist (not terminating). A
// copy the state does not list is not started: it left the volume, or
// never joined; the volume manager of a listed replica never needs it. A
// listed copy of a volume being deleted leaves (its copy is destroyed). A
// listed copy is otherwise one of the volume's replicas, counted by the
// safe-deletion rule: the active primary's pod is started outside the
// ReplicaSet; a secondary's pod joins the ReplicaSet, raised first if all
// its pods already exist, unless the ReplicaSet already runs the
// secondaries it wants: the copy then tries to leave first.
func Adopt(s replica.State, node replica.Node, current, running int) Adoption {
	r, ok := s.Replica(node)
	if !ok {
		return Adoption{Reason: fmt.Sprintf("%s is not in the volume's replica list", node)}
	}
	if s.Deleting {
		return Adoption{Leave: true, Reason: fmt.Sprintf("the volume is being deleted: %s's copy is destroyed", node)}
	}
	if r.Active {
		return Adoption{Start: true, RaiseTo: current, Reason: fmt.Sprintf("%s is the active primary; its pod stays outside the ReplicaSet", node)}
	}
	raise := current
	if running >= current {
		raise = running + 1
	}
	held := fmt.Sprintf("%s holds snapshot %d of epoch %d", node, r.Snapshot, r.SnapshotEpoch)
	if running >= Desired(s).Secondaries {
		return Adoption{Leave: true, Start: true, RaiseTo: raise,
			Reason: fmt.Sprintf("%s; the ReplicaSet runs the %d secondaries wanted: the copy leaves if the safe-deletion rule allows it", held, running)}
	}
	return Adoption{Start: true, RaiseTo: raise, Reason: held}
}
