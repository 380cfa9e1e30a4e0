package replica_test

import (
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

// settles ticks p n times with the given wake and staleness, settling
// (ok, no failure) whenever it is due, and returns the ticks that settled
// and whether each was full.
func settles(p *replica.Pace, n, wake int, stale bool, every int, failing bool) (at []int, full []bool) {
	for i := 1; i <= n; i++ {
		p.Tick()
		if ok, f := p.Next(wake, stale, every); ok {
			at, full = append(at, i), append(full, f)
			p.Settled(failing, false)
		}
	}
	return at, full
}

func TestPaceFirstSettleIsAtOnceAndFull(t *testing.T) {
	p := replica.NewPace(100, true)
	if ok, full := p.Next(-1, false, 10); !ok || !full {
		t.Fatalf("first Next = %v, %v; want a full settle at once", ok, full)
	}
	p.Settled(false, false)
	if ok, _ := p.Next(-1, false, 10); ok {
		t.Fatal("a second settle with nothing new")
	}
}

func TestPaceAnIdleWatchingReplicaSettlesOnlyWhenToldOrAtResync(t *testing.T) {
	p := replica.NewPace(1000, true)
	p.Next(-1, false, 1000)
	p.Settled(false, false)
	if at, _ := settles(&p, 500, -1, false, 1000, false); len(at) != 0 {
		t.Fatalf("idle and watching, it settled at ticks %v", at)
	}
	p.Changed()
	if ok, full := p.Next(-1, false, 1000); !ok || full {
		t.Fatalf("after a change Next = %v, %v; want a settle, not full", ok, full)
	}
	p.Settled(false, false)
	// The resync: 1000 ticks after the last full read, busy or idle.
	if at, full := settles(&p, 500, -1, false, 1000, false); !slices.Equal(at, []int{500}) || !full[0] {
		t.Fatalf("resync settles at %v (full %v), want tick 500 of these (1000 since the first), full", at, full)
	}
}

func TestPaceWithoutAWatchEveryTickSettles(t *testing.T) {
	p := replica.NewPace(1000, false)
	p.Next(-1, false, 10)
	p.Settled(false, false)
	if at, _ := settles(&p, 5, -1, false, 10, false); !slices.Equal(at, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("polling settles at %v, want every tick", at)
	}
	p = replica.NewPace(1000, true)
	p.Next(-1, false, 10)
	p.Settled(false, false)
	p.Watching(false) // the watch ended
	if at, _ := settles(&p, 3, -1, false, 10, false); !slices.Equal(at, []int{1, 2, 3}) {
		t.Fatalf("after the watch ended it settles at %v, want every tick", at)
	}
}

func TestPaceWakeStaleAndIncompleteSettle(t *testing.T) {
	for name, c := range map[string]struct {
		wake       int
		stale      bool
		incomplete bool
	}{
		"the machine's wake is due": {wake: 0},
		"the view is stale":         {wake: -1, stale: true},
		"the last settle stopped":   {wake: -1, incomplete: true},
	} {
		p := replica.NewPace(1000, true)
		p.Next(-1, false, 10)
		p.Settled(false, c.incomplete)
		p.Tick()
		if ok, _ := p.Next(c.wake, c.stale, 10); !ok {
			t.Errorf("%s: no settle", name)
		}
	}
}

// A watch silent for three snapshot intervals may be the watch of an API
// server that stopped answering: the state is read then.
func TestPaceASilentWatchIsReadAfterThreeSnapshotIntervals(t *testing.T) {
	p := replica.NewPace(1000, true)
	p.Next(-1, false, 4)
	p.Settled(false, false)
	if at, _ := settles(&p, 30, -1, false, 4, false); !slices.Equal(at, []int{12, 24}) {
		t.Fatalf("a silent watch is read at ticks %v, want 12 and 24 (three intervals of 4)", at)
	}
}

func TestPaceFailuresBackOffUpToTheBound(t *testing.T) {
	p := replica.NewPace(100000, false)
	p.Next(-1, false, 1)
	p.Settled(true, false)
	at, _ := settles(&p, 400, -1, false, 1, true)
	var gaps []int
	for i, last := 0, 0; i < len(at); i++ {
		gaps, last = append(gaps, at[i]-last), at[i]
	}
	want := []int{1, 3, 7, 15, 31, 63, 63, 63, 63, 63}
	if !slices.Equal(gaps[:len(want)], want) {
		t.Fatalf("gaps between failing settles %v, want %v", gaps, want)
	}
	// A success ends the back-off.
	p.Tick()
	for ok, _ := p.Next(-1, false, 1); !ok; ok, _ = p.Next(-1, false, 1) {
		p.Tick()
	}
	p.Settled(false, false)
	if at, _ := settles(&p, 3, -1, false, 1, false); !slices.Equal(at, []int{1, 2, 3}) {
		t.Fatalf("after a success settles at %v, want every tick again", at)
	}
}

func TestPaceARequestOrTheViewsReturnEndsABackOff(t *testing.T) {
	p := replica.NewPace(1000, false)
	for range 5 { // a back-off of 31 ticks
		p.Next(-1, false, 1)
		p.Settled(true, false)
	}
	if !p.BackingOff() {
		t.Fatal("no back-off after five failures")
	}
	p.Requested()
	if ok, _ := p.Next(-1, false, 1); !ok {
		t.Fatal("a request waited out the back-off")
	}
	p.Settled(true, false)
	p.Tick()
	if ok, _ := p.Next(-1, false, 1); ok {
		t.Fatal("a settle during the back-off")
	}
	p.Changed() // the replica's own writes are changes: no end of the back-off
	if ok, _ := p.Next(-1, false, 1); ok {
		t.Fatal("a change ended the back-off")
	}
	p.ViewReturned()
	if ok, _ := p.Next(-1, true, 1); !ok {
		t.Fatal("the view's return did not end the back-off")
	}
}
