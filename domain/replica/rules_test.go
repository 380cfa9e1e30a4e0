package replica

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// One test per rule, each checked to fail when its rule is removed.

func TestTakeoverRefusesWhenAnotherReplicaIsNewer(t *testing.T) {
	base := func() State {
		return State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
			{Node: "a", Snapshot: 9, SnapshotEpoch: 2, Active: true},
			{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
			{Node: "c", Snapshot: 9, SnapshotEpoch: 2, Ready: true, Taker: true},
		}}
	}
	s := base()
	if err := Takeover(&s, "b", "a", 1); !errors.Is(err, ErrBehind) || s.Epoch != 2 {
		t.Fatalf("b took over although c holds a newer snapshot: %v (epoch %d)", err, s.Epoch)
	}
	s = base()
	if err := Takeover(&s, "c", "a", 1); err != nil || s.Epoch != 3 || s.Primary != "c" {
		t.Fatalf("the newest ready replica could not take over: %v, %+v", err, s)
	}
}

// A fetch target only the lost primary holds is no copy: receives of it
// (partial ones kept to be resumed, OpenZFS) never complete. They refuse
// no takeover, and the takeover forgets them (they are on the branch
// given up); a target on the volume's line stays.
func TestTakeoverIsNotRefusedByATargetOnlyTheLostPrimaryHoldsAndForgetsIt(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2, Active: true},
		{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Fetching: Snap{Number: 9, Epoch: 2}, Taker: true},
		{Node: "c", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Fetching: Snap{Number: 9, Epoch: 2}, Taker: true},
		{Node: "d", Snapshot: 7, SnapshotEpoch: 2, Fetching: Snap{Number: 8, Epoch: 2}},
	}}
	if err := Takeover(&s, "b", "a", 1); err != nil || s.Primary != "b" {
		t.Fatalf("b refused because of c's target 9, which only the lost a holds: %v", err)
	}
	for _, r := range s.Replicas {
		want := Snap{}
		if r.Node == "d" {
			want = Snap{Number: 8, Epoch: 2} // b holds it: d's transfer goes on
		}
		if r.Fetching != want {
			t.Errorf("%s's target after the takeover: %v, want %v", r.Node, r.Fetching, want)
		}
	}
}

// The primary a takeover replaced is on the branch the volume's history
// left until it reports a snapshot of the new epoch: not ready, never a
// successor nor promoted, and never counted as newer, its snapshot
// equal to the fork point included (writes never snapshotted on top).
func TestTheReplacedPrimaryIsOnAFencedBranchUntilItReportsTheNewEpoch(t *testing.T) {
	for _, fenced := range []Snap{{Number: 9, Epoch: 2}, {Number: 8, Epoch: 2}} {
		s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
			{Node: "a", Snapshot: fenced.Number, SnapshotEpoch: 2, Active: true, Ready: true},
			{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
			{Node: "c", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
		}}
		if err := Takeover(&s, "b", "a", 1); err != nil {
			t.Fatal(err)
		}
		if a, _ := s.Replica("a"); !a.OnFencedBranch() || a.Forked != (Fork{Epoch: 3, At: Snap{Number: 8, Epoch: 2}}) {
			t.Fatalf("a after the takeover: %+v", a)
		}
		// b acknowledges both (even a: the fenced rule, not the taker
		// rule, is what must refuse it below).
		if err := Acknowledge(&s, "b", s.Epoch, []Node{"a", "c"}); err != nil {
			t.Fatal(err)
		}
		if err := Report(&s, "a", fenced, true); err != nil {
			t.Fatal(err)
		}
		if a, _ := s.Replica("a"); a.Ready || !a.OnFencedBranch() {
			t.Fatalf("a, back on its branch %v, is recorded %+v", fenced, a)
		}
		// b is lost before its first snapshot of epoch 3.
		if err := Takeover(&s, "a", "b", 1); !errors.Is(err, ErrFenced) {
			t.Fatalf("a, on a fenced branch, took over from b: %v", err)
		}
		if n, _ := s.NewestReplica(); n.Node == "a" || IsReady(s, Replica{Node: "c", Snapshot: 7, SnapshotEpoch: 2}, 0) {
			t.Fatalf("a's %v counts as the newest", fenced)
		}
		next := s
		next.Replicas = append([]Replica(nil), s.Replicas...)
		if err := Takeover(&next, "c", "b", 0); err != nil || next.Epoch != 4 {
			t.Fatalf("c, holding b's snapshot, was refused because of a's fenced %v: %v", fenced, err)
		}
		idle := s
		idle.Replicas = append([]Replica(nil), s.Replicas...)
		idle.Replicas[1].Active = false // b inactive: nobody else is active
		if err := Promote(&idle, "a"); !errors.Is(err, ErrFenced) {
			t.Fatalf("a, on a fenced branch, was promoted: %v", err)
		}
		// a rolls back to 8 (still on the branch), then receives 10 of
		// epoch 3: resynced, the fork forgotten.
		_ = Report(&s, "a", Snap{Number: 8, Epoch: 2}, true)
		if a, _ := s.Replica("a"); !a.OnFencedBranch() {
			t.Fatalf("a left its branch by rolling back: %+v", a)
		}
		_ = Report(&s, "b", Snap{Number: 10, Epoch: 3}, true)
		_ = Report(&s, "a", Snap{Number: 10, Epoch: 3}, true)
		if a, _ := s.Replica("a"); a.OnFencedBranch() || a.Forked != (Fork{}) || !a.Ready {
			t.Fatalf("a resynced onto epoch 3 but is %+v", a)
		}
	}
}

func TestAReplicaThatReportsAFencedPrimarysSnapshotIsOnThatBranchToo(t *testing.T) {
	// c fetched a's snapshot 9 of epoch 2 after b took over at 8 (both a
	// and c were cut off from the state, not from each other: 5.6, on a
	// stale view), and reports it once the state reads again.
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 8, Active: true, Ready: true},
		{Node: "b", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 8, Ready: true, Taker: true},
		{Node: "c", Snapshot: 8, SnapshotEpoch: 2, SnapshotGUID: 8, Ready: true, Taker: true},
	}}
	if err := Takeover(&s, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := Acknowledge(&s, "b", s.Epoch, []Node{"c"}); err != nil {
		t.Fatal(err)
	}
	if err := Report(&s, "c", Snap{Number: 9, Epoch: 2, GUID: 9}, true); err != nil {
		t.Fatal(err)
	}
	c, _ := s.Replica("c")
	if !c.OnFencedBranch() || c.Ready || c.Forked != (Fork{Epoch: 3, At: Snap{Number: 8, Epoch: 2, GUID: 8}}) {
		t.Fatalf("c, holding the fenced primary's 9 of epoch 2, is recorded %+v", c)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	// b is lost before its first snapshot of epoch 3: c must not make the
	// writes the takeover gave up the volume's history.
	if err := Takeover(&s, "c", "b", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("c, on the fenced branch, took over from b: %v", err)
	}
	// Once c resynced on b's line it is off the branch.
	if err := Report(&s, "c", Snap{Number: 10, Epoch: 3, GUID: 10}, true); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Replica("c"); c.OnFencedBranch() || c.Forked.Epoch != 0 {
		t.Fatalf("c, on b's line again, is recorded %+v", c)
	}
	// The primary's own reports, and a secondary's of the current line,
	// never mark anything.
	if err := Report(&s, "b", Snap{Number: 10, Epoch: 3, GUID: 10}, true); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Replica("b"); b.Forked.Epoch != 0 {
		t.Fatalf("the primary marked itself: %+v", b)
	}
}

func TestTakeoverRefusesAReplicaThatIsNotReady(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 40, SnapshotEpoch: 2, Active: true},
		{Node: "b", Snapshot: 3, SnapshotEpoch: 2, Ready: false, Taker: true},
	}}
	if err := Takeover(&s, "b", "a", 1); !errors.Is(err, ErrBehind) {
		t.Fatalf("a replica far behind took over, giving up far more than one interval of writes: %v", err)
	}
}

func TestTakeoverRefusesAReplicaThePrimaryNeverAcknowledged(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2, Active: true},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 2, Ready: true},
	}}
	if err := Takeover(&s, "b", "a", 1); !errors.Is(err, ErrNotTaker) || s.Epoch != 2 {
		t.Fatalf("b took over although a never acknowledged it (a may not have asked it for a promise): %v", err)
	}
	if err := Acknowledge(&s, "a", 2, Candidates(s, "a")); err != nil {
		t.Fatal(err)
	}
	if err := Takeover(&s, "b", "a", 1); err != nil || s.Primary != "b" {
		t.Fatalf("the acknowledged b could not take over: %v", err)
	}
	if r, _ := s.Replica("b"); r.Taker {
		t.Fatal("the new primary's term starts with a taker of the old one")
	}
	// The ended term acknowledges nothing more.
	if err := Acknowledge(&s, "a", 2, []Node{"b"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a, taken over, acknowledged a taker: %v", err)
	}
}

func TestAPromotionStartsItsTermWithNoTaker(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 2, Taker: true},
	}}
	if err := Promote(&s, "b"); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Replicas {
		if r.Taker {
			t.Fatalf("%s is still a taker after b's promotion: b's guard never acknowledged it", r.Node)
		}
	}
	if got := Candidates(s, "b"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("candidates %v, want [a]", got)
	}
}

func TestLeaveRefusesTheActivePrimary(t *testing.T) {
	// Enough copies elsewhere: only its being the active primary stops it.
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 2, Active: true},
		{Node: "b", Snapshot: 5, SnapshotEpoch: 2},
		{Node: "c", Snapshot: 5, SnapshotEpoch: 2},
	}}
	_, err := Leave(&s, "a", Holding{Newest: Snap{Number: 5, Epoch: 2}, HasData: true}, false)
	if !errors.Is(err, ErrUnsafe) || len(s.Replicas) != 3 {
		t.Fatalf("the active primary left: %v, %+v", err, s.Replicas)
	}
}

// machineAt returns b's machine having observed s and its local snapshots.
func machineAt(t *testing.T, s State, local []Snap, hasData bool) *Machine {
	t.Helper()
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 100})
	if err := m.Step(Observed{State: s}); err != nil {
		t.Fatal(err)
	}
	if err := m.Step(LocalRead{Snaps: local, HasData: hasData}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDataNeverSnapshottedIsNeverReceivedOverAndRaisedOnce(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 1, Active: true, Ready: true},
		{Node: "b"},
	}}
	m := machineAt(t, s, nil, true)
	a, ok := m.Next()
	al, isAlert := a.(Alert)
	if !ok || !isAlert || !strings.Contains(al.Reason, "without any replication snapshot") {
		t.Fatalf("a dataset with writes never snapshotted: next action %#v, want the alert", a)
	}
	_ = m.Step(ActionDone{Action: a})
	_ = m.Step(Tick{})
	_ = m.Step(Observed{State: s})
	_ = m.Step(LocalRead{HasData: true})
	if a, ok := m.Next(); ok {
		t.Fatalf("after the alert: %#v; want nothing (no fetch over the data, no second alert)", a)
	}
}

func TestAfterItsReportTheMachineWaitsForAFreshRead(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Replicas: []Replica{{Node: "b"}}}
	m := machineAt(t, s, []Snap{{Number: 3, Epoch: 1, GUID: 33}}, true)
	a, ok := m.Next()
	if _, isReport := a.(ReportSnapshot); !ok || !isReport {
		t.Fatalf("first action %#v, want a report", a)
	}
	_ = m.Step(ActionDone{Action: a})
	_ = m.Step(LocalRead{Snaps: []Snap{{Number: 3, Epoch: 1, GUID: 33}}, HasData: true})
	if a, ok := m.Next(); ok {
		t.Fatalf("decided %#v on the view its own report made stale; want to wait for a read", a)
	}
}

func TestAChangedDatasetOfTheCurrentPrimaryIsSnapshottedNotDiscarded(t *testing.T) {
	newest := Snap{Number: 5, Epoch: 3, GUID: 55}
	changed := func(s State) Action {
		m := machineAt(t, s, []Snap{newest}, true)
		m.modified = true // as after a fetch that failed with ErrModified
		a, ok := m.Next()
		if !ok {
			t.Fatal("no action for a changed dataset")
		}
		return a
	}
	// b was the last primary of epoch 3 and is no longer active: its
	// changes are the volume's newest data.
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 3, Primary: "b", Replicas: []Replica{
		{Node: "b", Snapshot: 5, SnapshotEpoch: 3, SnapshotGUID: 55, Ready: true},
		{Node: "c", Snapshot: 5, SnapshotEpoch: 3, SnapshotGUID: 55, Ready: true},
	}}
	if a, ok := changed(s).(TakeSnapshot); !ok || a.Epoch != 3 || a.Number != 6 {
		t.Fatalf("the current epoch's primary's changes: %#v, want a snapshot 6 of epoch 3", changed(s))
	}
	// Another replica is the primary of epoch 4: b's changes are not the
	// volume's; they are rolled back, with a reason (raised as RolledBack).
	s.Epoch, s.Primary = 4, "c"
	s.Replicas[1].Active = true
	if a, ok := changed(s).(Rollback); !ok || a.To != newest || a.Reason == "" {
		t.Fatalf("a secondary's changes: %#v, want a rollback to its newest snapshot with a reason", changed(s))
	}
}

func TestALaggingReadIsNotDecidedOn(t *testing.T) {
	// b was promoted in epoch 5; a read from before (epoch 4, a primary)
	// arrives later. b must not act as a secondary on it.
	now := State{Volume: "v", ReplicationFactor: 1, Epoch: 5, Primary: "b", Replicas: []Replica{
		{Node: "a", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 77, Ready: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 77, Active: true, Ready: true},
	}}
	old := State{Volume: "v", ReplicationFactor: 1, Epoch: 4, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 8, SnapshotEpoch: 4, SnapshotGUID: 88, Active: true, Ready: true},
		{Node: "b", Snapshot: 7, SnapshotEpoch: 4, SnapshotGUID: 77, Ready: true},
	}}
	m := machineAt(t, now, []Snap{{Number: 7, Epoch: 4, GUID: 77}}, true)
	if a, ok := m.Next(); ok {
		t.Fatalf("unexpected action %#v", a)
	}
	_ = m.Step(Observed{State: old})
	if a, ok := m.Next(); ok {
		t.Fatalf("acted on a read older than one it had seen: %#v", a)
	}
}

func TestAFailedSourceIsSkippedForAnotherAsNewNeverForAnOlderOne(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 3, Epoch: 1, Replicas: []Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 5},
		{Node: "b", Snapshot: 5, SnapshotEpoch: 1, SnapshotGUID: 5},
		{Node: "c", Snapshot: 4, SnapshotEpoch: 1, SnapshotGUID: 4},
		{Node: "d", Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: 1},
	}}
	if r, _ := ChooseSource(s, "d", nil); r.Node != "a" {
		t.Fatalf("source %s, want a", r.Node)
	}
	if r, _ := ChooseSource(s, "d", map[Node]bool{"a": true}); r.Node != "b" {
		t.Fatalf("with a failing: source %s, want b (as new as a)", r.Node)
	}
	if r, _ := ChooseSource(s, "d", map[Node]bool{"a": true, "b": true}); r.Node != "a" {
		t.Fatalf("with a and b failing: source %s, want a again, never c's older copy", r.Node)
	}
}

// Rule: with the volume's state gone, a copy is destroyed only if the
// replica saw Ferry's deletion mark, and only if it is a replica's copy
// (replication snapshots, or nothing). A state merely missing destroys
// nothing.
func TestRuleAnOrphanIsDestroyedOnlyOnTheDeletionMarkAndIfItWasAReplica(t *testing.T) {
	cases := []struct {
		h    Holding
		mark bool
		want bool
	}{
		{Holding{}, true, true},
		{Holding{HasData: true, Newest: Snap{Number: 4, Epoch: 1}}, true, true},
		{Holding{HasData: true}, true, false},
		{Holding{}, false, false},
		{Holding{HasData: true, Newest: Snap{Number: 4, Epoch: 1}}, false, false},
		{Holding{HasData: true}, false, false},
	}
	for _, c := range cases {
		if v := CanDestroyOrphan(c.h, c.mark); v.Allowed != c.want || v.Reason == "" {
			t.Errorf("CanDestroyOrphan(%+v, mark %v) = %+v, want allowed %v", c.h, c.mark, v, c.want)
		}
	}
}

// A copy on a fenced branch is neither a source nor a copy: once the
// primary that took over left the list, State.Fenced no longer tells its
// 15 of epoch 10 (given up at the takeover of epoch 11, from 14) from the
// volume's history, but the fork does. It must not be fetched, and it
// does not let the last copy of the volume's line leave.
func TestACopyOnAFencedBranchIsNoSourceAndNoHolder(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 11, Primary: "j1", Replicas: []Replica{
		{Node: "b", Snapshot: 15, SnapshotEpoch: 10, Forked: Fork{Epoch: 11, At: Snap{Number: 14, Epoch: 10}}},
		{Node: "c", Snapshot: 14, SnapshotEpoch: 10, Ready: true},
		{Node: "d", Snapshot: 13, SnapshotEpoch: 10},
	}}
	if src, ok := ChooseSource(s, "d", nil); !ok || src.Node != "c" {
		t.Fatalf("d fetches from %s (%v), want c: b's 15 was given up", src.Node, ok)
	}
	if src, ok := ChooseSource(s, "c", nil); ok {
		t.Fatalf("c fetches from %s: nothing newer on the volume's line", src.Node)
	}
	if v := CanDestroy(s, "c", false); v.Allowed {
		t.Fatalf("c, the last copy of the volume's line, may leave: %s", v.Reason)
	}
}

// A released volume is taken over only when its last primary holds the
// only copy of its final snapshot, by a successor within the allowed lag
// of it, which stays inactive; what it gives up is returned to be named.
func TestTakeoverReleasedGivesUpTheFinalSnapshotOnlyWhenNobodyElseHoldsIt(t *testing.T) {
	base := func() State {
		return State{Volume: "v", ReplicationFactor: 1, Epoch: 2, Primary: "a", Replicas: []Replica{
			{Node: "a", Snapshot: 9, SnapshotEpoch: 2, SnapshotGUID: 90, Ready: true},
			{Node: "b", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
			{Node: "c", Snapshot: 8, SnapshotEpoch: 2, Ready: true, Taker: true},
		}}
	}
	s := base()
	s.Replicas[0].Active = true
	if _, err := TakeoverReleased(&s, "b", "a", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("an active primary was taken over as released: %v", err)
	}
	s = base()
	s.Replicas[2].Snapshot, s.Replicas[2].SnapshotGUID = 9, 90
	if _, err := TakeoverReleased(&s, "b", "a", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("taken over although c holds the final snapshot (a publish promotes c): %v", err)
	}
	s = base()
	if _, err := TakeoverReleased(&s, "b", "a", 0); !errors.Is(err, ErrBehind) {
		t.Fatalf("taken over giving up more than the allowed lag: %v", err)
	}
	s = base()
	final, err := TakeoverReleased(&s, "b", "a", 1)
	if err != nil || final != (Snap{Number: 9, Epoch: 2, GUID: 90}) {
		t.Fatalf("TakeoverReleased = %v, %v", final, err)
	}
	b, _ := s.Replica("b")
	a, _ := s.Replica("a")
	if s.Epoch != 3 || s.Primary != "b" || b.Active || !a.OnFencedBranch() || a.Ready {
		t.Fatalf("after the released takeover: %+v", s)
	}
	if err := Promote(&s, "c"); err != nil {
		t.Fatalf("a publish on c was refused after the released takeover: %v", err)
	}
}

func TestOnlyTheActivePrimaryOfItsEpochResumes(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 2, Epoch: 2, Primary: "a", Replicas: []Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 2, Active: true},
		{Node: "b", Snapshot: 9, SnapshotEpoch: 2, Ready: true, Taker: true},
	}}
	if err := Resume(&s, "a", 2); err != nil {
		t.Fatal(err)
	}
	if a, _ := s.Replica("a"); a.Resumed != 1 {
		t.Fatalf("resumed %d, want 1", a.Resumed)
	}
	if err := Resume(&s, "b", 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("a secondary resumed: %v", err)
	}
	if err := Takeover(&s, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := Resume(&s, "a", 2); !errors.Is(err, ErrFenced) {
		t.Fatalf("a primary taken over resumed: %v", err)
	}
}

// The volume's own snapshot interval (its spec, which an operator may
// edit) counts in ticks of the machine's period; without one, or without a
// known period, the configured number of ticks does; an edit takes effect
// at the next read.
func TestThePrimarySnapshotsAtTheVolumesOwnIntervalOnceItReadsIt(t *testing.T) {
	s := State{Volume: "v", ReplicationFactor: 1, Epoch: 1, Primary: "b", Replicas: []Replica{{Node: "b", Active: true, Ready: true, Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: 11}}}
	local := []Snap{{Number: 1, Epoch: 1, GUID: 11}}
	ticksTo := func(m *Machine, st State) int {
		t.Helper()
		if err := m.Step(Observed{State: st}); err != nil {
			t.Fatal(err)
		}
		if err := m.Step(LocalRead{Snaps: local, HasData: true}); err != nil {
			t.Fatal(err)
		}
		for n := 1; n <= 100; n++ {
			_ = m.Step(Tick{})
			if a, ok := m.Next(); ok {
				if ts, isSnap := a.(TakeSnapshot); isSnap && ts.Periodic {
					return n
				}
				t.Fatalf("tick %d: %#v, want a periodic snapshot or nothing", n, a)
			}
		}
		return -1
	}
	m := NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 10, Tick: time.Second})
	if n := ticksTo(m, s); n != 10 {
		t.Fatalf("no interval of its own: snapshotted after %d ticks, want the configured 10", n)
	}
	s.SnapshotInterval = 3 * time.Second
	m = NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 10, Tick: time.Second})
	if n := ticksTo(m, s); n != 3 {
		t.Fatalf("the volume's 3s at a 1s tick: snapshotted after %d ticks, want 3", n)
	}
	s.SnapshotInterval = 2500 * time.Millisecond
	m = NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 10, Tick: time.Second})
	if n := ticksTo(m, s); n != 3 {
		t.Fatalf("2.5s at a 1s tick: snapshotted after %d ticks, want 3 (rounded up)", n)
	}
	m = NewMachine(MachineConfig{Self: "b", Keep: 2, SnapshotEvery: 10})
	if n := ticksTo(m, s); n != 10 {
		t.Fatalf("no tick known: snapshotted after %d ticks, want the configured 10", n)
	}
}
