package liveness

import (
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Review: a primary writing on a promise must stop 2 Margin before the
// promising observer may take it over, as with the lease (Held vs Lost):
// the fence takes time (kill, wait, unmount) and the two clocks drift. The
// primary a renewed last at 0 s (held until 4 s), then, cut off from the
// API server, asks b for a promise at 3 s (its clock); b receives it at
// once. a writes on until 3 s + the span; b must not take a for lost
// before 2 margins after that.
func TestAPromiseEndsTwoMarginsBeforeTheObserverMayTakeOver(t *testing.T) {
	const sent = 3 * time.Second
	o := NewObserver(cfg, "b")
	o.Read(0, leases("a", "1"))
	ok, span := o.Promise("a", sent) // no network delay: received when sent
	if !ok {
		t.Fatal("no promise")
	}
	held := Standing{Now: 0, LeaseUntil: cfg.Held(0), Promises: []Promise{{From: "b", Until: sent + span}}}
	takers := []replica.Node{"b"}
	stop := time.Duration(-1) // when a must stop writing
	for now := time.Duration(0); now < 20*time.Second; now += 10 * time.Millisecond {
		held.Now = now
		if !Decide(held, takers).MayWrite {
			stop = now
			break
		}
	}
	if stop < 0 {
		t.Fatal("a never stops writing")
	}
	for now := time.Duration(0); now < stop+2*cfg.Margin; now += 10 * time.Millisecond {
		if got := o.Lost(now); len(got) != 0 {
			t.Fatalf("a stops writing on its promise at %s, but b may take it over at %s: less than 2 margins (%s) apart", stop, now, 2*cfg.Margin)
		}
	}
}
