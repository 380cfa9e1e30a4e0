package liveness

import (
	"slices"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
)

// short is a 3 s lease (the default), beside the tests' 5 s cfg.
var short = Config{Renew: time.Second, Duration: 3 * s, Margin: s / 2}

func leases(kv ...string) map[replica.Node]string {
	m := map[replica.Node]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[replica.Node(kv[i])] = kv[i+1]
	}
	return m
}

func TestALeaseUnchangedForDurationPlusMarginIsLostAndARenewalRestartsItsAge(t *testing.T) {
	o := NewObserver(cfg, "b")
	o.Read(0, leases("a", "1", "b", "1"))
	o.Read(5*s, leases("a", "1", "b", "1"))
	if got := o.Lost(6*s - 1); len(got) != 0 {
		t.Fatalf("lost %v before duration + margin", got)
	}
	o.Read(6*s-1, leases("a", "2", "b", "1")) // a renewed just in time
	if got := o.Lost(11*s - 2); len(got) != 0 {
		t.Fatalf("lost %v although a renewed at 6 s", got)
	}
	if got := o.Lost(12 * s); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v at 12 s, want [a] (the observer itself never)", got)
	}
}

// The observer's own link broke while the observed node's did too (an API
// server outage): the lease it reads afterwards is old, but the node could
// not renew, and renews within a renewal once the server is back.
func TestAfterABlindSpellEveryLeaseGetsItsFullDurationAgain(t *testing.T) {
	o := NewObserver(cfg, "b")
	o.Read(0, leases("a", "1", "c", "1"))
	o.Blind() // the API server is away for a minute
	if got := o.Lost(30 * s); len(got) != 0 {
		t.Fatalf("blind, yet lost %v", got)
	}
	o.Read(60*s, leases("a", "1")) // back; c's lease is missing from the read
	if got := o.Lost(65 * s); len(got) != 0 {
		t.Fatalf("lost %v 5 s after the outage: a node had no chance to renew", got)
	}
	if got := o.Lost(66 * s); !slices.Equal(got, []replica.Node{"a", "c"}) {
		t.Fatalf("lost %v, want [a c] once duration + margin passed after the outage", got)
	}
}

// The API server held the observer's read for a minute (stopped: every
// request hangs, none fails) and the nodes' renewals with it: the answer
// shows the leases unchanged, which tells nothing; it counts as a blind
// spell ended by the answer. A read answered within a renewal period,
// however slow, does not (else a loaded API server would hide every
// loss).
func TestAReadHeldLongerThanAMarginCountsAsBlind(t *testing.T) {
	o := NewObserver(cfg, "b")
	o.Read(0, leases("a", "1", "c", "1"))
	o.ReadSince(1*s, 60*s, leases("a", "1", "c", "1")) // asked at 1 s, answered at 60 s
	if got := o.Lost(61 * s); len(got) != 0 {
		t.Fatalf("lost %v right after a read held for a minute: no node could renew meanwhile", got)
	}
	if got := o.Lost(66 * s); !slices.Equal(got, []replica.Node{"a", "c"}) {
		t.Fatalf("lost %v, want [a c] once duration + margin passed after the held read", got)
	}
	q := NewObserver(cfg, "b")
	q.Read(0, leases("a", "1"))
	q.ReadSince(6*s-cfg.Renew, 6*s, leases("a", "1")) // slow, within a renewal period
	if got := q.Lost(6 * s); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v at 6 s after a read within a renewal period, want [a]", got)
	}
}

func TestANodePromisedIsNotTakenForLostBeforeThePromiseEnds(t *testing.T) {
	o := NewObserver(cfg, "b")
	o.Read(0, leases("a", "1"))
	ok, span := o.Promise("a", 5*s) // a, cut off from the API server, asks
	if !ok || span != cfg.Duration-cfg.Margin {
		t.Fatalf("promise %v %s", ok, span)
	}
	// The promise lasts until 9 s on a's clock; b waits 2 margins more.
	if got := o.Lost(11*s - 1); len(got) != 0 {
		t.Fatalf("lost %v less than 2 margins after a promise that lasts until 9 s", got)
	}
	if got := o.Lost(11 * s); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v after the promise", got)
	}
	if ok, _ := o.Promise("b", 9*s); ok {
		t.Fatal("a node promised itself")
	}
	if ok, _ := o.Promise("stranger", 9*s); ok || len(o.promised) != 1 {
		t.Fatalf("a node with no lease got a promise (%d promised)", len(o.promised))
	}
	// A shorter promise later never shortens an earlier one.
	o2 := NewObserver(Config{Renew: s, Duration: 5 * s, Margin: s}, "b")
	o2.Read(0, leases("a", "1"))
	o2.Promise("a", 10*s)
	o2.promised["a"] = 20 * s
	o2.Promise("a", 11*s)
	if o2.promised["a"] != 20*s {
		t.Fatalf("promise shortened to %s", o2.promised["a"])
	}
}

func TestOnlyTheSuccessorTakesAnActivePrimarysVolumeOver(t *testing.T) {
	st := state() // a active primary; b and c ready at 8, d empty
	lost := []replica.Node{"a"}
	if got := Takeovers([]replica.State{st}, lost, "b", 1); len(got) != 1 || got[0].Lost != "a" || got[0].Volume.Volume != "v" {
		t.Fatalf("b takes over %+v, want v from a", got)
	}
	for _, n := range []replica.Node{"c", "d", "a"} {
		if got := Takeovers([]replica.State{st}, lost, n, 1); len(got) != 0 {
			t.Fatalf("%s takes over %+v: only the successor does", n, got)
		}
	}
	// b lost too: c is the successor, never a lost node.
	if got := Takeovers([]replica.State{st}, []replica.Node{"a", "b"}, "c", 1); len(got) != 1 {
		t.Fatalf("c takes over %+v with a and b lost", got)
	}
	if got := Takeovers([]replica.State{st}, []replica.Node{"a", "b"}, "b", 1); len(got) != 0 {
		t.Fatalf("lost b takes over %+v", got)
	}
	// Nothing to take over: a primary not active whose final snapshot
	// another replica holds (a publish promotes that one), a primary on a
	// live node, a volume being deleted.
	idle := state()
	idle.Replicas[0].Active = false
	idle.Replicas[2].Snapshot = 9
	deleting := state()
	deleting.Deleting = true
	for _, s := range []replica.State{idle, deleting} {
		if got := Takeovers([]replica.State{s}, lost, "b", 1); len(got) != 0 {
			t.Fatalf("takes over %+v", got)
		}
	}
	// A released primary lost with the only copy of its final snapshot:
	// the successor takes the released volume over.
	released := state()
	released.Replicas[0].Active = false
	if got := Takeovers([]replica.State{released}, lost, "b", 1); len(got) != 1 || !got[0].Released || got[0].Lost != "a" {
		t.Fatalf("b takes over %+v, want v released by a", got)
	}
	if got := Takeovers([]replica.State{released}, lost, "c", 1); len(got) != 0 {
		t.Fatalf("c takes over %+v: only the successor does", got)
	}
	if got := Takeovers([]replica.State{st}, []replica.Node{"c"}, "b", 1); len(got) != 0 {
		t.Fatalf("takes over %+v from a live primary", got)
	}
}

func TestANodeDeclaredOutOfServiceIsLostAtOnceButNeverItself(t *testing.T) {
	o := NewObserver(cfg, "b")
	o.Read(0, map[replica.Node]string{"a": "1", "b": "1"})
	if ok, _ := o.Promise("a", 0); !ok {
		t.Fatal("no promise")
	}
	o.OutOfService([]replica.Node{"a", "b", "z"})
	if got := o.Lost(time.Second); !slices.Equal(got, []replica.Node{"a", "z"}) {
		t.Fatalf("lost %v, want [a z]: declared out of service (a despite its promise), never b itself", got)
	}
	o.Blind()
	if got := o.Lost(time.Second); len(got) != 0 {
		t.Fatalf("lost %v while blind", got)
	}
	o.Read(2*time.Second, map[replica.Node]string{"a": "2", "b": "2"})
	o.OutOfService(nil)
	if got := o.Lost(2 * time.Second); len(got) != 0 {
		t.Fatalf("lost %v once the declaration is withdrawn", got)
	}
}

func TestAResumeSinceTheVerdictAndAPromiseAfterItAreRefused(t *testing.T) {
	before := replica.State{Volume: "v", Epoch: 2, Primary: "a", Replicas: []replica.Replica{{Node: "a", Active: true, Resumed: 1}}}
	now := before
	now.Replicas = []replica.Replica{{Node: "a", Active: true, Resumed: 1}}
	if ResumedSince(before, now, "a") {
		t.Fatal("no resume, but one seen")
	}
	now.Replicas[0].Resumed = 2
	if !ResumedSince(before, now, "a") || !ResumedSince(replica.State{}, now, "a") {
		t.Fatal("a resume since the verdict (or with no earlier state) not seen")
	}
	o := NewObserver(cfg, "b")
	o.Read(0, map[replica.Node]string{"a": "1"})
	if got := o.Lost(6 * time.Second); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v", got)
	}
	if ok, _ := o.Promise("a", 6*time.Second); ok {
		t.Fatal("promised a node this observer already takes for lost (a takeover may be under way)")
	}
}

// During a rolling update nodes of two releases run side by side: one
// that holds its lease for 5 s (until 4.5 s after its renewal) is watched
// by one whose own duration is 3 s. It is taken for lost after its own
// duration plus the margin, never the observer's shorter one, or the
// takeover would come while it still writes.
func TestANodeDeclaringALongerLeaseIsTakenForLostOnlyAfterItsOwnDuration(t *testing.T) {
	o := NewObserver(short, "b")
	o.ReadDeclared(0, 0, nil) // its first read, as after an outage, saw nobody
	o.ReadDeclared(0, 0, map[replica.Node]Lease{"a": {Value: "1", Duration: 5 * s}, "c": {Value: "1", Duration: 2 * s}})
	if got := o.Lost(5*s + s/2 - 1); slices.Contains(got, "a") {
		t.Fatalf("a, which holds its lease for 5 s, taken for lost at %v: before its own duration + margin", 5*s+s/2-1)
	}
	if got := o.Lost(5*s + s/2); !slices.Contains(got, "a") {
		t.Fatalf("a not lost after its own duration + margin: %v", got)
	}
	// c declares a shorter lease than the observer's: the observer's own
	// counts (it is never shortened by what a node says).
	if got := o.Lost(3*s + s/2 - 1); slices.Contains(got, "c") {
		t.Fatalf("c taken for lost before the observer's own duration + margin: %v", got)
	}
	if at, ok := o.NextLoss(0); !ok || at != 3*s+s/2 {
		t.Fatalf("NextLoss = %v, %v; want c's 3.5 s", at, ok)
	}
}

// A node's daemon replaced by one with a shorter lease: its first value
// still holds for the old duration (the old daemon's permits may let its
// primaries write on those terms), and so does every value until those
// terms end; values read after that hold for the new duration.
func TestALeaseShortenedByItsNodeHoldsForTheLongerOneUntilItsTermsEnd(t *testing.T) {
	o := NewObserver(short, "b")
	o.ReadDeclared(0, 0, map[replica.Node]Lease{"a": {Value: "1", Duration: 5 * s}})
	o.ReadDeclared(s, s, map[replica.Node]Lease{"a": {Value: "2", Duration: 3 * s}})
	o.ReadDeclared(2*s, 2*s, map[replica.Node]Lease{"a": {Value: "3", Duration: 3 * s}})
	// Value 2, seen at 1 s, holds on the 5 s terms until 6 s.
	if got := o.Lost(6*s + s/2 - 1); slices.Contains(got, "a") {
		t.Fatalf("a taken for lost before its first short value's longer terms ran out: %v", got)
	}
	if got := o.Lost(6*s + s/2); !slices.Contains(got, "a") {
		t.Fatalf("a not lost once those terms and the margin ran out: %v", got)
	}
	o.ReadDeclared(7*s, 7*s, map[replica.Node]Lease{"a": {Value: "4", Duration: 3 * s}})
	if got := o.Lost(10*s + s/2); !slices.Contains(got, "a") {
		t.Fatalf("a value read after the longer terms ended holds for the short duration only: %v", got)
	}
	if got := o.Lost(10*s + s/2 - 1); slices.Contains(got, "a") {
		t.Fatalf("lost before the short duration + margin: %v", got)
	}
}

// The longer hold of a shortened lease's first value outlives a blind
// spell and the next values: the earlier value's terms end when they end,
// whatever is read after.
func TestALongerHoldOutlivesABlindReadAndTheNextValues(t *testing.T) {
	o := NewObserver(short, "b")
	o.ReadDeclared(0, 0, map[replica.Node]Lease{"a": {Value: "1", Duration: 8 * s}})
	o.ReadDeclared(s/2, s/2, map[replica.Node]Lease{"a": {Value: "2", Duration: 3 * s}})
	o.Blind()
	o.ReadDeclared(s, s, map[replica.Node]Lease{"a": {Value: "2", Duration: 3 * s}})
	o.ReadDeclared(2*s, 2*s, map[replica.Node]Lease{"a": {Value: "3", Duration: 3 * s}})
	// Value 2, seen at 0.5 s, holds on the 8 s terms until 8.5 s.
	if got := o.Lost(9*s - 1); slices.Contains(got, "a") {
		t.Fatalf("a lost at %v, before the longer terms (until 8.5 s) and the margin: %v", 9*s-1, got)
	}
	if at, ok := o.NextLoss(2 * s); !ok || at != 9*s {
		t.Fatalf("NextLoss = %v, %v; want 9s", at, ok)
	}
}

// After an outage the volume managers need a few seconds to report what
// they received meanwhile: a lease seen again after a blind spell holds
// for AfterOutage at least, however short the lease.
func TestAfterAnOutageAShortLeaseHoldsLongEnoughForTheReports(t *testing.T) {
	o := NewObserver(short, "b")
	o.Read(0, leases("a", "1"))
	o.Blind()
	o.Read(60*s, leases("a", "1"))
	if got := o.Lost(60*s + AfterOutage + s/2 - 1); len(got) != 0 {
		t.Fatalf("lost %v before AfterOutage + margin after the outage", got)
	}
	if got := o.Lost(60*s + AfterOutage + s/2); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v, want [a]", got)
	}
}

// A daemon replacing another on its node knows nothing of the promises
// the other gave (kept in memory): it takes nobody for lost until they
// ended, on the other's terms.
func TestANewDaemonWaitsOutThePromisesItsPredecessorMayHaveGiven(t *testing.T) {
	o := NewObserver(short, "b")
	o.Read(10*s, leases("a", "1", "b", "1"))
	o.Inherit(10*s, 5*s) // the daemon before renewed b's lease for 5 s
	if got := o.Lost(15*s + s/2 - 1); len(got) != 0 {
		t.Fatalf("lost %v while a promise of the daemon before (up to 4.5 s from 10 s, and 2 margins) may still run", got)
	}
	if at, ok := o.NextLoss(12 * s); !ok || at != 15*s+s/2 {
		t.Fatalf("NextLoss = %v, %v; want 15.5s", at, ok)
	}
	if got := o.Lost(15*s + s/2); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v, want [a]", got)
	}
}

// An observer just started may be starting as the API server comes back
// from an outage: the leases of its first read hold AfterOutage at least,
// as after any blind spell.
func TestAFreshObserversFirstReadCountsAsAfterAnOutage(t *testing.T) {
	o := NewObserver(short, "b")
	o.Read(0, leases("a", "1"))
	if got := o.Lost(AfterOutage + s/2 - 1); len(got) != 0 {
		t.Fatalf("lost %v before AfterOutage + margin after the first read", got)
	}
	if got := o.Lost(AfterOutage + s/2); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v, want [a]", got)
	}
}

// A promise is honoured for AfterOutage at least: the asking node's
// copies may be cut off from the API server as it is (a stalled replica
// of it) and report what they fetched only once it answers again.
func TestAPromiseIsHonouredLongEnoughForTheReportsOfAnOutage(t *testing.T) {
	o := NewObserver(short, "b")
	o.ReadDeclared(0, 0, nil)
	o.Read(0, leases("a", "1"))
	if ok, span := o.Promise("a", 2*s); !ok || span != short.Duration-short.Margin {
		t.Fatalf("Promise = %v, %v", ok, span)
	}
	if got := o.Lost(2*s + AfterOutage + s/2 - 1); len(got) != 0 {
		t.Fatalf("lost %v before AfterOutage + margin after the promise", got)
	}
	if got := o.Lost(2*s + AfterOutage + s/2); !slices.Equal(got, []replica.Node{"a"}) {
		t.Fatalf("lost %v, want [a]", got)
	}
}

// A daemon declares the longer terms of the one it replaced until they
// surely ended, so a daemon replacing it in turn still finds them.
func TestADaemonDeclaresItsPredecessorsLongerTermsUntilTheyEnded(t *testing.T) {
	for _, c := range []struct {
		pred  time.Duration
		wrote bool
		since time.Duration
		want  time.Duration
	}{
		{5 * s, false, 0, 5 * s},            // before its first write
		{5 * s, true, 5*s + s/2 - 1, 5 * s}, // the predecessor's promises may still run
		{5 * s, true, 5*s + s/2, 3 * s},     // they ended
		{2 * s, false, 0, 3 * s},            // a shorter predecessor: its own
		{0, false, 0, 3 * s},                // none
	} {
		if got := short.Declared(c.pred, c.wrote, c.since); got != c.want {
			t.Errorf("Declared(%s, %v, %s) = %s, want %s", c.pred, c.wrote, c.since, got, c.want)
		}
	}
}

// The promises a daemon's predecessor gave are honoured for AfterOutage
// at least, as its own are: a lease that appears only after the first
// read (missed by the blind start's hold) is still held that long.
func TestInheritedPromisesAreHonouredForAfterOutageToo(t *testing.T) {
	o := NewObserver(short, "b")
	o.Read(10*s, leases("b", "1"))
	o.Inherit(10*s, 3*s)
	o.Read(10*s+s/5, leases("a", "1", "b", "2")) // a's lease, first seen after the first read
	if got := o.Lost(10*s + AfterOutage + s/2 - 1); len(got) != 0 {
		t.Fatalf("lost %v while a promise of the daemon before may still be honoured", got)
	}
}
