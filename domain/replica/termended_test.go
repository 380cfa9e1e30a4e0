package replica

import (
	"errors"
	"fmt"
	"testing"
)

func TestTermEndedOnlyForANewerTermWhosePrimaryIsNotThePeer(t *testing.T) {
	for _, c := range []struct {
		name  string
		st    State
		ended bool
	}{
		{"the same term goes on", State{Epoch: 3, Primary: "a", Replicas: []Replica{{Node: "a", Active: true}, {Node: "b"}}}, false},
		{"the same term, its primary stepped down", State{Epoch: 3, Primary: "a", Replicas: []Replica{{Node: "a"}, {Node: "b"}}}, false},
		{"a takeover by another node", State{Epoch: 4, Primary: "b", Replicas: []Replica{{Node: "a", Forked: Fork{Epoch: 4, At: Snap{Number: 5, Epoch: 3}}}, {Node: "b", Active: true}}}, true},
		{"a takeover that gave up the peer's final snapshot (TakeoverReleased)", State{Epoch: 4, Primary: "", Replicas: []Replica{{Node: "a", Forked: Fork{Epoch: 4, At: Snap{Number: 5, Epoch: 3}}}, {Node: "b"}}}, true},
		{"the peer no longer listed", State{Epoch: 4, Primary: "b", Replicas: []Replica{{Node: "b", Active: true}}}, true},
		{"a planned handover: the peer stepped down, b promoted", State{Epoch: 4, Primary: "b", Replicas: []Replica{{Node: "a"}, {Node: "b", Active: true}}}, false},
		{"a fork of an earlier takeover, before this term", State{Epoch: 4, Primary: "b", Replicas: []Replica{{Node: "a", Forked: Fork{Epoch: 2, At: Snap{Number: 1, Epoch: 1}}}, {Node: "b", Active: true}}}, false},
		{"a newer term of the peer's own (it was promoted again)", State{Epoch: 4, Primary: "a", Replicas: []Replica{{Node: "a", Active: true}, {Node: "b"}}}, false},
		{"an older view", State{Epoch: 2, Primary: "b", Replicas: []Replica{{Node: "a", Forked: Fork{Epoch: 2}}, {Node: "b", Active: true}}}, false},
	} {
		if got := TermEnded("a", 3, c.st); got != c.ended {
			t.Errorf("%s: TermEnded = %v, want %v", c.name, got, c.ended)
		}
	}
}

// A peer action stopped because its term ended is no failure: the machine
// decides again at once (no back-off) and does not avoid the peer; any
// other failure of the same action backs off until a tick.
func TestAPeerActionStoppedBecauseItsTermEndedIsDecidedAgainAtOnce(t *testing.T) {
	secondary := func() (*Machine, Action) {
		m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 1})
		st := State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "a", Replicas: []Replica{
			{Node: "a", Active: true, Snapshot: 2, SnapshotEpoch: 1, SnapshotGUID: 12, Ready: true},
			{Node: "b", Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: 11},
		}}
		var a Action
		for i := 0; ; i++ {
			_ = m.Step(Observed{State: st})
			_ = m.Step(LocalRead{Snaps: []Snap{{Number: 1, Epoch: 1, GUID: 11}}, HasData: true})
			var ok bool
			if a, ok = m.Next(); !ok {
				t.Fatal("the secondary behind decides nothing")
			}
			if p, ok := PeerOf(a); ok && p == "a" {
				break
			}
			if i == 4 {
				t.Fatalf("the secondary behind decides %T, not a peer action with a", a)
			}
			_ = m.Step(ActionDone{Action: a}) // a report: as written
		}
		if m.Term() != 1 {
			t.Fatalf("Term() = %d, want 1", m.Term())
		}
		return m, a
	}
	m, a := secondary()
	if err := m.Step(ActionDone{Action: a, Err: fmt.Errorf("%w: epoch 2 began", ErrTermEnded)}); err != nil {
		t.Fatal(err)
	}
	if m.backoff || m.avoid["a"] {
		t.Errorf("stopped because its term ended: back-off %v, a avoided %v; want neither", m.backoff, m.avoid["a"])
	}
	m, a = secondary()
	_ = m.Step(ActionDone{Action: a, Err: errors.New("connection reset")})
	if !m.backoff {
		t.Error("a failed peer action does not back off: the control case of this test is wrong")
	}
}
