package liveness

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestALostNodeIsFencedFromOutsideOnlyWhereConfiguredOnlyFromAnActivePrimaryAndOncePerLoss(t *testing.T) {
	active := Takeover{Volume: state(), Lost: "a"}
	released := Takeover{Volume: state(), Lost: "a", Released: true}
	cases := []struct {
		name               string
		t                  Takeover
		configured, fenced bool
		want               bool
	}{
		{"configured, active primary, not yet fenced: fenced first", active, true, false, true},
		{"no node fence configured: the lease bound is all", active, false, false, false},
		{"fenced already since the loss: once per loss", active, true, true, false},
		{"a released volume has no writer to fence", released, true, false, false},
	}
	for _, c := range cases {
		if got := FenceNodeFirst(c.t, c.configured, c.fenced); got != c.want {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}

func TestATakeoverIsAppliedOnlyWhenTheLostPrimaryHasNotResumedSinceTheVerdict(t *testing.T) {
	before := state() // a active, b and c takers at 8@2
	resumed := state()
	resumed.Replicas[0].Resumed = 1
	releasedBefore := state()
	releasedBefore.Replicas[0].Active = false
	cases := []struct {
		name    string
		before  replica.State
		fresh   replica.State
		t       Takeover
		self    replica.Node
		err     error
		primary replica.Node
		epoch   replica.Epoch
		active  bool
	}{
		{"an active primary lost: b takes over", before, state(), Takeover{Lost: "a"}, "b", nil, "b", 3, true},
		{"the lost primary resumed since the view read before the lease read: refused", before, resumed, Takeover{Lost: "a"}, "b", replica.ErrStaleView, "a", 2, true},
		{"a copy never acknowledged: refused", before, state(), Takeover{Lost: "a"}, "d", replica.ErrNotTaker, "a", 2, true},
		{"a released primary lost with the only copy of its final snapshot: b goes on inactive", releasedBefore, releasedBefore, Takeover{Lost: "a", Released: true}, "b", nil, "b", 3, false},
	}
	for _, c := range cases {
		st := c.fresh
		st.Replicas = slices.Clone(st.Replicas)
		c.t.Volume = c.before
		got, err := ApplyTakeover(&st, c.before, c.t, c.self, 1)
		if !errors.Is(err, c.err) || (c.err == nil && err != nil) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
			continue
		}
		p, _ := st.Replica(st.Primary)
		if st.Primary != c.primary || st.Epoch != c.epoch || p.Active != c.active {
			t.Errorf("%s: primary %s epoch %d active %v", c.name, st.Primary, st.Epoch, p.Active)
		}
		if c.err == nil && c.t.Released {
			if got.Final != (replica.Snap{Number: 9, Epoch: 2}) || got.From != (replica.Snap{Number: 8, Epoch: 2}) {
				t.Errorf("%s: given up %+v, want 9@2 from 8@2", c.name, got)
			}
		} else if got != (GivenUp{}) {
			t.Errorf("%s: given up %+v, want nothing", c.name, got)
		}
	}
}

func TestATakeoverRefusedByTheFreshStateIsNotRetried(t *testing.T) {
	for _, err := range []error{replica.ErrFenced, replica.ErrBehind, replica.ErrNotTaker, replica.ErrStaleView} {
		if !TakeoverRefused(fmt.Errorf("take v over: %w", err)) {
			t.Errorf("%v: not taken as refused", err)
		}
	}
	if TakeoverRefused(errors.New("the API server is away")) || TakeoverRefused(nil) {
		t.Error("an error that is no refusal is retried")
	}
}

func TestALostNodeOwesEveryEffectAfterATakeoverAndOnlyItsPlacementAfterAReleasedOne(t *testing.T) {
	all := AftermathOf(Takeover{Lost: "a"})
	released := AftermathOf(Takeover{Lost: "a", Released: true})
	if all != UnplaceTaintEvict || released != UnplaceOnly {
		t.Fatalf("aftermath of a takeover %d, of a released one %d", all, released)
	}
	if got := all.Steps(); !slices.Equal(got, []AftermathStep{Unplace, TaintNode, RemoveReplicaPods, EvictPods}) {
		t.Errorf("steps after a takeover %v: the label and the taint before the pods go, the replica pods first", got)
	}
	if got := released.Steps(); !slices.Equal(got, []AftermathStep{Unplace}) {
		t.Errorf("steps after a released takeover %v", got)
	}
	if got := NothingOwed.Steps(); len(got) != 0 {
		t.Errorf("nothing owed, steps %v", got)
	}
	// Never fewer effects than already owed, in either order.
	for _, c := range [][3]Aftermath{
		{NothingOwed, UnplaceOnly, UnplaceOnly},
		{NothingOwed, UnplaceTaintEvict, UnplaceTaintEvict},
		{UnplaceOnly, UnplaceTaintEvict, UnplaceTaintEvict},
		{UnplaceTaintEvict, UnplaceOnly, UnplaceTaintEvict},
	} {
		if got := c[0].With(c[1]); got != c[2] {
			t.Errorf("%d with %d: %d, want %d", c[0], c[1], got, c[2])
		}
	}
}

// A pod on a lost node stays in the API server (its kubelet confirms
// nothing) and the volume's workload counts it: the ReplicaSet as a
// secondary running, the sizer as a pod outside the ReplicaSet. Where
// the lost node's pods are deleted for their controllers to start them
// elsewhere, its replica pods go first, after the taint: the pods using
// the volume come back on the new primary's node, whose publish sizes the
// workload, which must count the lost node's no more by then.
func TestALostNodesReplicaPodsGoAfterTheTaintAndBeforeItsPodsUsingTheVolume(t *testing.T) {
	cases := []struct {
		name    string
		owed    Aftermath
		removed bool
	}{
		{"an active primary taken over: its pod outside the ReplicaSet, of a term that ended", AftermathOf(Takeover{Lost: "a"}), true},
		{"a secondary's node lost under an active primary (OwedOnLoss): its pod in the ReplicaSet", NothingOwed.With(UnplaceTaintEvict), true},
		{"a released primary taken over: nothing recreated, the node untainted, its pod stays", AftermathOf(Takeover{Lost: "a", Released: true}), false},
		{"nothing owed", NothingOwed, false},
	}
	for _, c := range cases {
		steps := c.owed.Steps()
		at := slices.Index(steps, RemoveReplicaPods)
		if (at >= 0) != c.removed {
			t.Errorf("%s: steps %v, replica pods removed %v, want %v", c.name, steps, at >= 0, c.removed)
			continue
		}
		if c.removed && !(slices.Index(steps, TaintNode) < at && at < slices.Index(steps, EvictPods)) {
			t.Errorf("%s: steps %v: the replica pods go after the taint and before the pods using the volume", c.name, steps)
		}
	}
}

func TestTheStateSaysWhatALostNodeOwesOncePerLoss(t *testing.T) {
	// b took v over from a; c holds a copy too. w: b is a secondary.
	v := state()
	v.Primary, v.Epoch = "b", 3
	v.Replicas[0].Active, v.Replicas[1].Active = false, true
	w := state()
	w.Volume = "w"
	inactive := v
	inactive.Volume = "x"
	inactive.Replicas = slices.Clone(v.Replicas)
	inactive.Replicas[1].Active = false
	states := []replica.State{w, v, inactive}
	cases := []struct {
		name string
		lost []replica.Node
		done map[Owed]bool
		want []Owed
	}{
		{"a lost: it owes v", []replica.Node{"a"}, nil, []Owed{{"v", "a"}}},
		{"a and c lost: both owe v", []replica.Node{"c", "a"}, nil, []Owed{{"v", "a"}, {"v", "c"}}},
		{"a's effects done since its loss: nothing", []replica.Node{"a"}, map[Owed]bool{{"v", "a"}: true}, nil},
		{"a node not listed owes nothing", []replica.Node{"e"}, nil, nil},
		{"nothing lost", nil, nil, nil},
	}
	for _, c := range cases {
		if got := OwedOnLoss(states, c.lost, "b", c.done); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// Only the active primary's daemon carries the effects out.
	if got := OwedOnLoss(states, []replica.Node{"a"}, "c", nil); len(got) != 0 {
		t.Errorf("a secondary owes %v", got)
	}
}
