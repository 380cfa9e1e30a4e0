package liveness

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
)

var cfg = Config{Renew: time.Second, Duration: 5 * time.Second, Margin: time.Second}

const s = time.Second

func TestTimingsUnderWhichANodeWouldFenceBetweenRenewalsAreRefused(t *testing.T) {
	for _, c := range []Config{{}, {Renew: 4 * s, Duration: 5 * s, Margin: s}, {Renew: s, Duration: 5 * s}, {Renew: -s, Duration: 5 * s, Margin: s}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// A node stops writing (its lease held Duration - Margin from the send of
// its last good renewal) 2 Margin before any observer may take it for lost
// (Duration + Margin from when the observer first saw that renewal, which
// is after it was sent): on clocks that run at the same rate, no takeover
// overlaps a writer; the margins absorb drift and delays.
func TestANodeStopsWritingBeforeAnyObserverMayTakeItForLost(t *testing.T) {
	for sent := time.Duration(0); sent < 20*s; sent += 300 * time.Millisecond {
		held := cfg.Held(sent)
		for delay := time.Duration(0); delay < 3*s; delay += 250 * time.Millisecond {
			seen := sent + delay // the observer sees the renewal no earlier than it was sent
			for now := seen; now < held+2*cfg.Margin; now += 100 * time.Millisecond {
				if cfg.Lost(seen, now) {
					t.Fatalf("sent %s, seen %s: lost at %s, less than 2 margins after the node stopped holding its lease at %s", sent, seen, now, held)
				}
			}
		}
	}
	if !cfg.Lost(0, 6*s) || cfg.Lost(0, 6*s-1) {
		t.Fatal("a lease unchanged for duration + margin is lost, and not a moment before")
	}
}

func TestAPrimaryWritesOnItsLeaseOrOnEveryTakersPromise(t *testing.T) {
	takers := []replica.Node{"b", "c"}
	cases := []struct {
		name  string
		st    Standing
		takes []replica.Node
		write bool
		until time.Duration
		why   string
	}{
		{"lease held", Standing{Now: 3 * s, LeaseUntil: 4 * s}, takers, true, 4 * s, "lease is held"},
		{"lease held, every taker promised beyond it: until the promises' end", Standing{Now: 3 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}, {From: "c", Until: 7 * s}}}, takers, true, 7 * s, "beyond it"},
		{"lease held, one taker promised beyond it: until the lease's end", Standing{Now: 3 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}}}, takers, true, 4 * s, "lease is held"},
		{"lease held, promises ending before it: until the lease's end", Standing{Now: 3 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}, {From: "c", Until: 3500 * time.Millisecond}}}, takers, true, 4 * s, "lease is held"},
		{"lease held, nobody could take over", Standing{Now: 3 * s, LeaseUntil: 4 * s}, nil, true, 4 * s, "lease is held"},
		{"lease ran out, no promise", Standing{Now: 4 * s, LeaseUntil: 4 * s}, takers, false, 0, "b, which could take over"},
		{"one taker promised", Standing{Now: 5 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}}}, takers, false, 0, "c, which could take over"},
		{"every taker promised", Standing{Now: 5 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}, {From: "c", Until: 7 * s}, {From: "c", Until: 6 * s}}}, takers, true, 7 * s, "promised"},
		{"a promise ran out", Standing{Now: 7 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}, {From: "c", Until: 7 * s}}}, takers, false, 0, "c, which could take over"},
		{"a stranger's promise counts for nothing", Standing{Now: 5 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 9 * s}, {From: "x", Until: 9 * s}}}, takers, false, 0, "c"},
		{"nobody could take over", Standing{Now: 5 * s, LeaseUntil: 4 * s}, nil, true, 5 * s, "no other node"},
	}
	for _, c := range cases {
		v := Decide(c.st, c.takes)
		if v.MayWrite != c.write || (c.write && v.Until != c.until) || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

func TestANodePromisesOnlyWhileItHearsFromThePrimarysNode(t *testing.T) {
	if ok, span := cfg.MayPromise(10*s, 13*s); !ok || span != 4*s {
		t.Fatalf("heard 3 s ago: %v %s", ok, span)
	}
	if ok, _ := cfg.MayPromise(10*s, 14*s); ok {
		t.Fatal("a node that has not heard from the primary for duration - margin promised")
	}
	// A promise ends before the promiser could take the primary for lost.
	if _, span := cfg.MayPromise(0, 0); span >= cfg.Duration+cfg.Margin {
		t.Fatalf("a promise of %s outlasts the wait before a takeover", span)
	}
}

func state() replica.State {
	return replica.State{Volume: "v", ReplicationFactor: 3, Epoch: 2, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2, Ready: true, Active: true},
		{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
		{Node: "c", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
		{Node: "d"},
	}}
}

func TestThePrimaryAcknowledgesTheOtherReplicasHoldingData(t *testing.T) {
	st := state()
	for i := range st.Replicas {
		st.Replicas[i].Taker = false
	}
	got := replica.Candidates(st, "a")
	if len(got) != 2 || got[0] != "b" || got[1] != "c" {
		t.Fatalf("candidates %v, want [b c] (d holds nothing)", got)
	}
	if got := replica.Candidates(state(), "a"); len(got) != 0 {
		t.Fatalf("candidates %v, want none: b and c are acknowledged", got)
	}
	if got := replica.Candidates(st, "b"); len(got) != 0 {
		t.Fatalf("candidates %v of a secondary, want none", got)
	}
}

func TestOnlyAnAcknowledgedReplicaSucceeds(t *testing.T) {
	st := state()
	st.Replicas[1].Taker = false // b, first by name, never acknowledged
	if n, ok := Successor(st, "a", 1); !ok || n != "c" {
		t.Fatalf("successor %q %v, want c (b was never acknowledged)", n, ok)
	}
	st.Replicas[2].Taker = false
	if n, ok := Successor(st, "a", 1); ok {
		t.Fatalf("successor %q although the primary acknowledged nobody", n)
	}
}

func TestEveryObserverNamesTheSameSuccessorTheNewestReadyReplica(t *testing.T) {
	n, ok := Successor(state(), "a", 1)
	if !ok || n != "b" {
		t.Fatalf("successor %q %v, want b (as new as c, first by name)", n, ok)
	}
	st := state()
	st.Replicas[2].Snapshot = 9
	if n, ok := Successor(st, "a", 1); !ok || n != "c" {
		t.Fatalf("successor %q %v, want c (the newest)", n, ok)
	}
	// What c receives is not a copy: 9 lives only on the lost a, so a
	// partial receive of it never completes.
	st = state()
	st.Replicas[2].Fetching = replica.Snap{Number: 9, Epoch: 2}
	if n, ok := Successor(st, "a", 1); !ok || n != "b" {
		t.Fatalf("successor %q %v, want b (c's target, held by the lost primary alone, does not count)", n, ok)
	}
	// A copy on the branch an earlier takeover left is never one.
	st = state()
	st.Replicas[1].Forked = replica.Fork{Epoch: 2, At: replica.Snap{Number: 7, Epoch: 1}}
	st.Replicas[1].SnapshotEpoch, st.Replicas[1].Snapshot, st.Replicas[1].Ready = 1, 20, false
	if n, ok := Successor(st, "a", 1); !ok || n != "c" {
		t.Fatalf("successor %q %v, want c (b is on a fenced branch, and its 20 of epoch 1 counts for nothing)", n, ok)
	}
	// Too far behind the lost primary's last report: nobody takes over.
	st = state()
	st.Replicas[0].Snapshot = 12
	if n, ok := Successor(st, "a", 1); ok {
		t.Fatalf("successor %q although every survivor is 4 snapshots behind", n)
	}
	// Not the primary: nothing to take over.
	if n, ok := Successor(state(), "b", 1); ok {
		t.Fatalf("successor %q of a node that is not the primary", n)
	}
}

// NextLoss is when a reader must read again to take a node for lost on
// time: the oldest unchanged lease's Duration + Margin, later while this
// observer's promise to that node runs; never itself; nothing while blind.
func TestNextLossIsTheEarliestInstantALeaseMayRunOut(t *testing.T) {
	cfg := Config{Renew: time.Second, Duration: 5 * time.Second, Margin: 500 * time.Millisecond}
	o := NewObserver(cfg, "self")
	o.Read(0, map[replica.Node]string{"self": "1", "a": "1", "b": "1"})
	o.Read(time.Second, map[replica.Node]string{"self": "2", "a": "1", "b": "2"})
	if at, ok := o.NextLoss(time.Second); !ok || at != 5500*time.Millisecond {
		t.Fatalf("NextLoss = %v, %v; want a's 5.5 s", at, ok)
	}
	if ok, _ := o.Promise("a", 2*time.Second); !ok {
		t.Fatal("no promise to a")
	}
	// a is promised until 2 + (5 - 0.5) + 2*0.5 = 7.5 s: b's 6.5 s comes first.
	if at, ok := o.NextLoss(2 * time.Second); !ok || at != 6500*time.Millisecond {
		t.Fatalf("NextLoss with a promised = %v, %v; want b's 6.5 s", at, ok)
	}
	if lost := o.Lost(6500 * time.Millisecond); len(lost) != 1 || lost[0] != "b" {
		t.Fatalf("Lost at NextLoss = %v, want [b]", lost)
	}
	if at, ok := o.NextLoss(6500 * time.Millisecond); !ok || at != 7500*time.Millisecond {
		t.Fatalf("NextLoss once b is lost = %v, %v; want a's promise end 7.5 s", at, ok)
	}
	o.Blind()
	if _, ok := o.NextLoss(8 * time.Second); ok {
		t.Fatal("NextLoss while blind")
	}
}
