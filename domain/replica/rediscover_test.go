package replica

import (
	"errors"
	"slices"
	"testing"
)

// A volume's state was lost while a holds 3@5 and b, whose node has not
// answered yet, holds the newer 4@5. Rebuilt by a's daemon.
func rebuiltByA(t *testing.T) State {
	t.Helper()
	s, err := Rediscover("v", 2, "a", Snap{Number: 3, Epoch: 5, GUID: 13}, []Node{"c", "a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRediscoverStartsANewEraWithItsCopyAndAwaitsTheOthers(t *testing.T) {
	s := rebuiltByA(t)
	if s.Epoch != EraAfter(5) || s.Epoch <= 5 || s.Primary != "" {
		t.Fatalf("rebuilt: epoch %d primary %q, want the era after 5 (%d) and no primary", s.Epoch, s.Primary, EraAfter(5))
	}
	if !slices.Equal(s.Awaiting, []Node{"b", "c"}) {
		t.Fatalf("awaiting %v, want b and c (not the rebuilder)", s.Awaiting)
	}
	if a, _ := s.Replica("a"); a.Holds() != (Snap{Number: 3, Epoch: 5, GUID: 13}) || a.Ready || a.Active {
		t.Fatalf("the rebuilder's entry: %+v", a)
	}
	if _, err := Rediscover("v", 2, "a", Snap{}, nil); err == nil {
		t.Fatal("a copy without a replication snapshot rebuilt a state")
	}
}

// Rule: no promotion while a node that may hold a newer copy is awaited.
// Without it the first acquirer (a, 3@5) wins, and b's newer 4@5 is
// rolled back (kept aside at best).
func TestRuleNoPromotionWhileANodeIsAwaited(t *testing.T) {
	s := rebuiltByA(t)
	if err := Promote(&s, "a"); !errors.Is(err, ErrRediscovering) {
		t.Fatalf("Promote while b and c are awaited: %v, want ErrRediscovering", err)
	}
	m := NewMachine(MachineConfig{Self: "a", Keep: 2, SnapshotEvery: 5, AllowedLag: 1})
	_ = m.Step(Acquire{})
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 5, GUID: 13}}, HasData: true, Unchanged: true})
	if a, ok := m.Next(); ok {
		t.Fatalf("a replica of a state awaiting answers decided %T %+v", a, a)
	}
	if on, why := m.Acquiring(); !on || why == "" {
		t.Fatalf("Acquiring says %v %q, want it waiting for the survey", on, why)
	}
	// b answers with its newer copy, c with none: the survey is over.
	if err := Answer(&s, "b", true, Snap{Number: 4, Epoch: 5, GUID: 14}); err != nil {
		t.Fatal(err)
	}
	if err := Answer(&s, "c", false, Snap{}); err != nil {
		t.Fatal(err)
	}
	if len(s.Awaiting) != 0 {
		t.Fatalf("still awaiting %v", s.Awaiting)
	}
	if err := Promote(&s, "a"); !errors.Is(err, ErrBehind) {
		t.Fatalf("Promote of the older copy after the survey: %v, want ErrBehind", err)
	}
	_ = m.Step(Observed{State: s})
	if a, _ := m.Next(); a != (ReportSnapshot{Snap: Snap{Number: 3, Epoch: 5, GUID: 13}, Ready: true}) {
		t.Fatalf("the acquirer after the survey: %T %+v, want its report, ready now", a, a)
	} else {
		_ = Report(&s, "a", a.(ReportSnapshot).Snap, true)
		_ = m.Step(ActionDone{Action: a})
		_ = m.Step(Observed{State: s})
	}
	if a, _ := m.Next(); a != (ReadPeer{Peer: "b"}) {
		t.Fatalf("the acquirer after the survey: %T %+v, want it catching up from b", a, a)
	}
	if err := Promote(&s, "b"); err != nil || s.Epoch != EraAfter(5)+1 {
		t.Fatalf("Promote of the newest copy: %v, epoch %d", err, s.Epoch)
	}
}

func TestAnswerRaisesTheEraAboveAnAwaitedCopysEpoch(t *testing.T) {
	s := rebuiltByA(t)
	newer := Snap{Number: 2, Epoch: EraAfter(5) + 3, GUID: 22} // b saw a rebuild before
	if err := Answer(&s, "b", true, newer); err != nil {
		t.Fatal(err)
	}
	if s.Epoch != EraAfter(newer.Epoch) {
		t.Fatalf("epoch %d after b's answer of epoch %d, want the era after it (%d)", s.Epoch, newer.Epoch, EraAfter(newer.Epoch))
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	// A node not awaited (late, or given up) cannot raise it.
	Forget(&s, "c")
	late := Snap{Number: 1, Epoch: s.Epoch + 1, GUID: 31}
	if err := Answer(&s, "c", true, late); err == nil {
		t.Fatal("a late answer from an epoch after the volume's was listed")
	}
}

func TestAnAnswerIsIdempotentAndAnAnswerWithoutACopyListsNothing(t *testing.T) {
	s := rebuiltByA(t)
	for range 2 {
		if err := Answer(&s, "b", true, Snap{Number: 4, Epoch: 5, GUID: 14}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Answer(&s, "c", false, Snap{}); err != nil {
		t.Fatal(err)
	}
	if len(s.Replicas) != 2 || len(s.Awaiting) != 0 {
		t.Fatalf("after the answers: %+v", s)
	}
	if _, listed := s.Replica("c"); listed {
		t.Fatal("a node with no copy was listed")
	}
}

// Rule: no copy is surplus while nodes are awaited (they may hold the
// newest), except on the volume's deletion.
func TestRuleNoCopyLeavesWhileNodesAreAwaited(t *testing.T) {
	s := rebuiltByA(t)
	_ = Answer(&s, "b", true, Snap{Number: 3, Epoch: 5, GUID: 13})
	s.ReplicationFactor = 1 // a is surplus by count
	holds := Holding{Newest: Snap{Number: 3, Epoch: 5, GUID: 13}, HasData: true, Unchanged: true}
	if _, err := Leave(&s, "a", holds, false); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Leave while c is awaited: %v, want ErrUnsafe", err)
	}
	s.Deleting = true
	if _, err := Leave(&s, "a", holds, true); err != nil {
		t.Fatalf("Leave of a volume being deleted: %v", err)
	}
}

func TestValidateRefusesAnActivePrimaryWhileAwaiting(t *testing.T) {
	s := rebuiltByA(t)
	s.Primary, s.Replicas[0].Active = "a", true
	if err := s.Validate(); err == nil {
		t.Fatal("a rebuilt state awaiting answers validated with an active primary")
	}
	s = rebuiltByA(t)
	s.Awaiting = []Node{"c", "b"}
	if err := s.Validate(); err == nil {
		t.Fatal("unsorted awaited nodes validated")
	}
}
