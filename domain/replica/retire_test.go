package replica

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

// a was the primary of epoch 4 and released the volume holding 9@4; b
// holds 7@4. a's node is then deleted for good.
func releasedOnA() State {
	return State{Volume: "v", ReplicationFactor: 2, Epoch: 4, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 4, SnapshotGUID: 90, Ready: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 70, Taker: true},
	}}
}

// Rule: a retired copy is no copy. While a's entry is listed, no other
// copy may be promoted (it is behind a's 9@4); once a is retired, b is
// promoted in a new epoch with no taker of a's term left.
func TestRuleARetiredCopyNoLongerHoldsThePromotionBack(t *testing.T) {
	s := releasedOnA()
	if err := Promote(&s, "b"); !errors.Is(err, ErrBehind) {
		t.Fatalf("promote b while a's newer copy is listed: %v, want ErrBehind", err)
	}
	s = releasedOnA()
	changed, err := Retire(&s, "a", Gone)
	if err != nil || !changed {
		t.Fatalf("retire a: changed %v, %v", changed, err)
	}
	if _, ok := s.Replica("a"); ok || s.Primary != "" {
		t.Fatalf("after retiring a: %+v", s)
	}
	if b, _ := s.Replica("b"); b.Taker {
		t.Fatalf("b is still a taker of the retired primary's term: %+v", b)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Promote(&s, "b"); err != nil || s.Primary != "b" || s.Epoch != 5 {
		t.Fatalf("promote b after a retired: %v (%+v)", err, s)
	}
}

// Rule: the active primary is never retired: its pod may be writing the
// only current copy. A takeover ends its term first.
func TestRuleTheActivePrimaryIsNeverRetired(t *testing.T) {
	s := releasedOnA()
	s.Replicas[0].Active = true
	before := cloneState(s)
	for _, why := range []Departure{Gone, Empty} {
		if changed, err := Retire(&s, "a", why); !errors.Is(err, ErrUnsafe) || changed {
			t.Fatalf("retire the active primary (%s): changed %v, %v", why, changed, err)
		}
		if !reflect.DeepEqual(s, before) {
			t.Fatalf("a refused retirement changed the state: %+v", s)
		}
	}
	if EmptyHere(s, "a", false, false) {
		t.Fatal("the active primary's empty pool retires it")
	}
}

// Rule: a retired copy is not counted by the safe-deletion rule. With a's
// lost entry listed, c (at a's 9@4) may destroy its copy counting a and b
// (b at 9@4 too); once a is retired, only b holds it: c stays.
func TestRuleARetiredCopyIsNotCountedByTheSafeDeletionRule(t *testing.T) {
	s := releasedOnA()
	s.Replicas[1].Snapshot, s.Replicas[1].SnapshotGUID = 9, 90
	s.Replicas = append(s.Replicas, Replica{Node: "c", Snapshot: 9, SnapshotEpoch: 4, SnapshotGUID: 90})
	if v := CanDestroy(s, "c", false); !v.Allowed {
		t.Fatalf("before: %+v", v)
	}
	if _, err := Retire(&s, "a", Gone); err != nil {
		t.Fatal(err)
	}
	if v := CanDestroy(s, "c", false); v.Allowed {
		t.Fatalf("after a retired, c may still destroy its copy: %+v", v)
	}
}

func TestRetireForgetsAnAwaitedNodeAndIgnoresAnUnlistedOne(t *testing.T) {
	s, err := Rediscover("v", 2, "a", Snap{Number: 3, Epoch: 5, GUID: 13}, []Node{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := Retire(&s, "c", Gone); err != nil || !changed || !slices.Equal(s.Awaiting, []Node{"b"}) {
		t.Fatalf("retire awaited c: changed %v, %v, awaiting %v", changed, err, s.Awaiting)
	}
	if changed, err := Retire(&s, "z", Gone); err != nil || changed {
		t.Fatalf("retire unlisted z: changed %v, %v", changed, err)
	}
}

func TestRetireesAreTheListedAndAwaitedNodesWhoseObjectIsDeleted(t *testing.T) {
	s := releasedOnA()
	s.Awaiting = []Node{"d"}
	exists := func(n Node) bool { return n == "b" }
	if got := Retirees(s, "b", exists); !slices.Equal(got, []Node{"a", "d"}) {
		t.Fatalf("retirees %v, want a and d", got)
	}
	if got := Retirees(s, "a", func(Node) bool { return false }); !slices.Equal(got, []Node{"b", "d"}) {
		t.Fatalf("retirees seen from a %v: a daemon never retires its own node as gone", got)
	}
}

func TestEmptyHereOnlyWithNeitherCopyNorVolumeManager(t *testing.T) {
	s := releasedOnA()
	for _, c := range []struct {
		node             Node
		copyHere, vmHere bool
		want             bool
	}{
		{"b", false, false, true},
		{"b", true, false, false},
		{"b", false, true, false}, // a new replica joins before its first receive
		{"z", false, false, false},
	} {
		if got := EmptyHere(s, c.node, c.copyHere, c.vmHere); got != c.want {
			t.Errorf("EmptyHere(%s, copy %v, manager %v) = %v, want %v", c.node, c.copyHere, c.vmHere, got, c.want)
		}
	}
}
