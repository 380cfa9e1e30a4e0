package liveness

import (
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestATermIsFencedOnceTheNodeMayNotWriteAndGivenBackOnceItMayAgain(t *testing.T) {
	takers := []replica.Node{"b"}
	held := Standing{Now: 3 * s, LeaseUntil: 4 * s}
	ranOut := Standing{Now: 5 * s, LeaseUntil: 4 * s}
	promised := Standing{Now: 5 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 8 * s}}}
	cases := []struct {
		name   string
		st     Standing
		fenced bool
		act    GuardAct
		write  bool
		why    string
	}{
		{"lease held, not fenced: writes on", held, false, Leave, true, "lease is held"},
		{"lease ran out, no promise: fenced", ranOut, false, FenceIt, false, "has not promised"},
		{"lease ran out, fenced already: stays fenced", ranOut, true, Leave, false, "has not promised"},
		{"fenced, the lease renewed: given back", held, true, GiveBack, true, "lease is held"},
		{"fenced, every taker promised: given back", promised, true, GiveBack, true, "promised not to"},
		{"lease ran out, every taker promised: writes on", promised, false, Leave, true, "promised not to"},
	}
	for _, c := range cases {
		v := FenceOrGiveBack(c.st, takers, c.fenced)
		if v.Act != c.act || v.Write.MayWrite != c.write || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
	if v := FenceOrGiveBack(promised, takers, false); v.Write.Until != 8*s {
		t.Errorf("while it writes on a promise, the guard looks again when the promise ends: %+v", v)
	}
}

func TestACopyTheViewDoesNotKnowIsFencedOnlyWithoutTheLeaseAndOnlyIfSomeoneCouldTakeItOver(t *testing.T) {
	ranOut := LeaseSeen{Tried: true}
	held := LeaseSeen{Held: true, Tried: true}
	unknown := Fence{Reason: ReasonUnknown, Unknown: true}
	byTerm := Fence{Reason: "the node's lease ran out and b has not promised"}
	cases := []struct {
		name  string
		lease LeaseSeen
		c     UnknownCopy
		act   GuardAct
	}{
		{"lease ran out, copy unknown: fenced", ranOut, UnknownCopy{}, FenceIt},
		{"not tried to renew yet: left (a lease not held says nothing)", LeaseSeen{}, UnknownCopy{}, Leave},
		{"lease held: left", held, UnknownCopy{}, Leave},
		{"lease held again, fenced unknown: given back", held, UnknownCopy{Fence: unknown}, GiveBack},
		{"lease held again, fenced by its term: its term gives it back", held, UnknownCopy{Known: true, Fence: byTerm}, Leave},
		{"lease ran out, fenced unknown: stays fenced", ranOut, UnknownCopy{Fence: unknown}, Leave},
		{"lease ran out, the view knows it: its term decides", ranOut, UnknownCopy{Known: true}, Leave},
		{"lease ran out, fenced already by its term: left", ranOut, UnknownCopy{Fence: byTerm}, Leave},
		{"lease ran out, a single copy: nobody takes it over", ranOut, UnknownCopy{SingleCopy: true}, Leave},
	}
	for _, c := range cases {
		v := FenceUnknown(c.lease, c.c)
		if v.Act != c.act || v.Reason == "" {
			t.Errorf("%s: %+v", c.name, v)
		}
		if v.Act == FenceIt && v.Reason != ReasonUnknown {
			t.Errorf("%s: reason %q", c.name, v.Reason)
		}
	}
	if !ranOut.LooksForUnknown() || held.LooksForUnknown() || (LeaseSeen{}).LooksForUnknown() {
		t.Error("the guard lists its copies only once it tried to renew and does not hold its lease")
	}
}

func TestAVolumeTakenOverFromUnderAWriterHereIsFencedAndOneReleasedNever(t *testing.T) {
	// b took the volume over from a (epoch 5); a's copy is still listed.
	takenOver := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 5, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 7, SnapshotEpoch: 4}, {Node: "b", Snapshot: 7, SnapshotEpoch: 4, Ready: true, Active: true}}}
	primaryHere := replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 4, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 7, SnapshotEpoch: 4, Ready: true, Active: true}, {Node: "b", Snapshot: 7, SnapshotEpoch: 4, Ready: true}}}
	released := takenOver
	released.Replicas = []replica.Replica{{Node: "a", Snapshot: 7, SnapshotEpoch: 4}, {Node: "b", Snapshot: 7, SnapshotEpoch: 4, Ready: true}}
	// The view shows a as the primary, not active: a handover here, or a
	// view lagging behind a's promotion.
	inactiveHere := primaryHere
	inactiveHere.Replicas = []replica.Replica{{Node: "a", Snapshot: 7, SnapshotEpoch: 4, Ready: true}, {Node: "b", Snapshot: 7, SnapshotEpoch: 4, Ready: true}}
	notListed := takenOver
	notListed.Replicas = takenOver.Replicas[1:]

	cases := []struct {
		name string
		in   TakenOverView
		act  TakenOverAct
		why  string
	}{
		{"active here: remembered", TakenOverView{State: primaryHere}, StillPrimary, "here"},
		{"seen active, taken over: read the mounts", TakenOverView{State: takenOver, SeenActive: true}, ReadPodsWrite, "another node"},
		{"seen active, taken over, a pod here writes: fenced", TakenOverView{State: takenOver, SeenActive: true, PodsWrite: ReadTrue}, FenceTaken, "b is the active primary (epoch 5) while pods here still mount"},
		{"seen active, taken over, no pod writes: forgotten", TakenOverView{State: takenOver, SeenActive: true, PodsWrite: ReadFalse}, PrimaryGone, "no pod"},
		{"seen active, released (nobody active): forgotten", TakenOverView{State: released, SeenActive: true}, PrimaryGone, "released"},
		{"seen active, the primary here but inactive: forgotten", TakenOverView{State: inactiveHere, SeenActive: true}, PrimaryGone, "released"},
		{"never seen active, nobody active: nothing", TakenOverView{State: released, FirstLook: true}, NotTakenOver, ""},
		{"never seen active, looked at before: nothing", TakenOverView{State: takenOver}, NotTakenOver, ""},
		{"never seen active, not listed here: nothing", TakenOverView{State: notListed, FirstLook: true}, NotTakenOver, ""},
		{"first look, taken over: read the mounts", TakenOverView{State: takenOver, FirstLook: true}, ReadPodsWrite, ""},
		{"first look, no pod writes: nothing", TakenOverView{State: takenOver, FirstLook: true, PodsWrite: ReadFalse}, NotTakenOver, ""},
		{"first look, a pod writes: read the state afresh", TakenOverView{State: takenOver, FirstLook: true, PodsWrite: ReadTrue}, ReadPrimaryNow, ""},
		{"first look, a pod writes, the fresh read shows it primary here: the view lags, nothing", TakenOverView{State: takenOver, FirstLook: true, PodsWrite: ReadTrue, PrimaryNow: ReadTrue}, NotTakenOver, "lags"},
		{"first look, a pod writes, confirmed not primary: fenced", TakenOverView{State: takenOver, FirstLook: true, PodsWrite: ReadTrue, PrimaryNow: ReadFalse}, FenceTaken, "which this daemon did not see start"},
	}
	for _, c := range cases {
		c.in.Self = "a"
		v := FenceTakenOver(c.in)
		if v.Act != c.act || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

func TestPodsGivenBackAreRestartedOnlyWhileTheNodeIsStillThePrimaryOrTheCopyWasFencedUnknownAndUnlockedOnlyOnThePrimary(t *testing.T) {
	byTerm := Fence{Reason: "the node's lease ran out and b has not promised"}
	unknown := Fence{Reason: ReasonUnknown, Unknown: true}
	watchdog := Fence{Reason: "its volume manager's watchdog fenced it: the permit ran out", Watchdog: true}
	cases := []struct {
		name    string
		f       Fence
		r       Resumed
		restart bool
		unlock  bool // a watchdog's write lock lifted: only on the primary
		finish  bool // a watchdog's fence finished by the daemon's before the restart
	}{
		{"still the primary, resumed: restarted", byTerm, ResumedPrimary, true, true, false},
		{"taken over meanwhile: left to the survivor", byTerm, ResumedNotPrimary, false, false, false},
		{"volume gone: nothing", byTerm, ResumedGone, false, false, false},
		{"fenced unknown, a secondary's copy: restarted", unknown, ResumedNotPrimary, true, false, false},
		{"fenced unknown, the primary's: restarted", unknown, ResumedPrimary, true, true, false},
		{"fenced unknown, volume gone: nothing", unknown, ResumedGone, false, false, false},
		{"fenced by its watchdog, a secondary's copy: restarted", watchdog, ResumedNotPrimary, true, false, true},
		{"fenced by its watchdog, the primary's: restarted", watchdog, ResumedPrimary, true, true, true},
		{"fenced by its watchdog, volume gone: nothing", watchdog, ResumedGone, false, false, false},
	}
	for _, c := range cases {
		if v := GiveBackPods(c.f, c.r); v.Restart != c.restart || v.Unlock != c.unlock || v.FinishFence != c.finish || v.Reason == "" {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

func TestAFenceRecordIsNoneOnlyWhenZero(t *testing.T) {
	if (Fence{}).Fenced() || !(Fence{Reason: "x"}).Fenced() || !(Fence{Unknown: true}).Fenced() {
		t.Error("Fenced")
	}
	if ReadingOf(true) != ReadTrue || ReadingOf(false) != ReadFalse {
		t.Error("ReadingOf")
	}
}

// A renewal sent after the lease ran out comes after a lapse, unless every
// taker's promise covered the instant it was sent; without takers there
// is nothing to lapse.
func TestARenewalSentPastTheLeasesEndIsALapse(t *testing.T) {
	takers := []replica.Node{"b"}
	if Lapsed(Standing{Now: 4, LeaseUntil: 5}, takers) {
		t.Error("a renewal sent while the lease held is a lapse")
	}
	if !Lapsed(Standing{Now: 6, LeaseUntil: 5}, takers) {
		t.Error("a renewal sent past the lease's end is no lapse")
	}
	if Lapsed(Standing{Now: 6, LeaseUntil: 5, Promises: []Promise{{From: "b", Until: 7}}}, takers) {
		t.Error("a renewal sent within the takers' promises is a lapse")
	}
	if Lapsed(Standing{Now: 6, LeaseUntil: 5}, nil) {
		t.Error("a term without takers lapsed")
	}
}
