package liveness

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

const ms = time.Millisecond

func TestTheWatchdogFencesOnceTheGuardsDeadlineHasPassedOrWhenItsPermitWentAway(t *testing.T) {
	p := Permit{Until: 10 * s, Margin: 500 * ms, Volumes: map[volume.ID]time.Duration{"promised": 12 * s, "fenced": 9 * s, "free": Forever}}
	cases := []struct {
		name  string
		in    WatchInput
		fence bool
		next  time.Duration
		why   string
	}{
		{"before the lease's end", WatchInput{Published: true, Permit: p, Volume: "v", Now: 9 * s, Poll: 200 * ms}, false, 200 * ms, "for 1s more"},
		{"just before the lease's end: looks again at it", WatchInput{Published: true, Permit: p, Volume: "v", Now: 10*s - 50*ms, Poll: 200 * ms}, false, 50 * ms, "more"},
		{"at the lease's end", WatchInput{Published: true, Permit: p, Volume: "v", Now: 10 * s, Poll: 200 * ms}, true, 200 * ms, "until 0s ago"},
		{"after the lease's end", WatchInput{Published: true, Permit: p, Volume: "v", Now: 11 * s, Poll: 200 * ms}, true, 200 * ms, "until 1s ago"},
		{"a volume's own deadline: its takers promised", WatchInput{Published: true, Permit: p, Volume: "promised", Now: 11 * s, Poll: 200 * ms}, false, 200 * ms, "more"},
		{"a volume the guard fenced although the lease runs", WatchInput{Published: true, Permit: p, Volume: "fenced", Now: 9 * s, Poll: 200 * ms}, true, 200 * ms, "ago"},
		{"a volume nobody may take over", WatchInput{Published: true, Permit: p, Volume: "free", Now: 1000 * s, Poll: 200 * ms}, false, 200 * ms, "no other node"},
		{"no permit of this boot, never one read: not armed (an older daemon)", WatchInput{Volume: "v", Now: 9 * s, Poll: 200 * ms}, false, 200 * ms, "not watched yet"},
		{"armed, the permit gone or unreadable", WatchInput{Armed: true, Volume: "v", Now: 9 * s, Poll: 200 * ms}, true, 200 * ms, "gone or unreadable"},
		{"armed, a newer daemon's permit", WatchInput{Armed: true, Newer: true, Volume: "v", Now: 9 * s, Poll: 200 * ms}, false, 200 * ms, "does not understand"},
		{"armed, deadline passed", WatchInput{Armed: true, Published: true, Permit: p, Volume: "v", Now: 11 * s, Poll: 200 * ms}, true, 200 * ms, "until 1s ago"},
		{"a secondary, deadline passed", WatchInput{Published: true, Permit: p, Volume: "v", Now: 11 * s, Poll: 200 * ms, Secondary: true}, false, 200 * ms, "not the active primary"},
		{"a secondary, no permit", WatchInput{Volume: "v", Now: 11 * s, Poll: 200 * ms, Secondary: true}, false, 200 * ms, "not the active primary"},
		{"fenced as the primary, then known as a secondary: still fenced", WatchInput{Published: true, Permit: p, Volume: "v", Now: 11 * s, Poll: 200 * ms, Secondary: true, Fencing: true}, true, 200 * ms, "until 1s ago"},
		{"fenced, then known as a secondary, the deadline ahead again: the spell ends", WatchInput{Published: true, Permit: p, Volume: "v", Now: 9 * s, Poll: 200 * ms, Secondary: true, Fencing: true}, false, 200 * ms, "more"},
		{"a period longer than half the margin is cut to it", WatchInput{Published: true, Permit: p, Volume: "v", Now: 5 * s, Poll: time.Second}, false, 250 * ms, "more"},
		{"a period of nothing is a millisecond", WatchInput{Published: true, Permit: p, Volume: "v", Now: 5 * s}, false, ms, "more"},
	}
	for _, c := range cases {
		v := Watch(c.in)
		if v.Fence != c.fence || v.Next != c.next || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: %+v, want fence %v, next %s, reason with %q", c.name, v, c.fence, c.next, c.why)
		}
	}
}

// A watchdog arms on the first permit it reads and stays armed while it
// reads none (gone, unreadable) or a secondary's look passes; a newer
// daemon's permit disarms it, a permit it understands arms it again.
func TestAWatchdogArmsOnlyOnAPermitItUnderstands(t *testing.T) {
	p := Permit{Until: 10 * s, Margin: 500 * ms}
	steps := []struct {
		name  string
		in    WatchInput
		armed bool
		fence bool
	}{
		{"no permit yet (an older daemon)", WatchInput{}, false, false},
		{"still none", WatchInput{}, false, false},
		{"a secondary reads one", WatchInput{Published: true, Permit: p, Secondary: true}, true, false},
		{"a permit, deadline ahead", WatchInput{Published: true, Permit: p, Now: 9 * s}, true, false},
		{"the permit gone", WatchInput{}, true, true},
		{"a newer daemon's permit", WatchInput{Newer: true}, false, false},
		{"none after it", WatchInput{}, false, false},
		{"ours again, deadline passed", WatchInput{Published: true, Permit: p, Now: 10 * s}, true, true},
	}
	armed := false
	for _, st := range steps {
		in := st.in
		in.Armed, in.Volume, in.Poll = armed, "v", 200*ms
		v := Watch(in)
		if v.Armed != st.armed || v.Fence != st.fence {
			t.Fatalf("%s: armed %v, fence %v; want %v, %v (%s)", st.name, v.Armed, v.Fence, st.armed, st.fence, v.Reason)
		}
		armed = v.Armed
	}
}

func TestThePermitIsTheGuardsOwnVerdictVolumeByVolume(t *testing.T) {
	terms := []Term{{Volume: "b-only", Takers: []replica.Node{"b"}}, {Volume: "b-and-c", Takers: []replica.Node{"b", "c"}}}
	free := []volume.ID{"untaken"}
	cases := []struct {
		name string
		st   Standing
		want map[volume.ID]time.Duration // and "other": a volume not named
	}{
		{"lease held", Standing{Now: 3 * s, LeaseUntil: 4 * s},
			map[volume.ID]time.Duration{"b-only": 4 * s, "b-and-c": 4 * s, "untaken": Forever, "other": 4 * s}},
		{"lease ran out, b promised", Standing{Now: 5 * s, LeaseUntil: 4 * s, Promises: []Promise{{From: "b", Until: 8 * s}}},
			map[volume.ID]time.Duration{"b-only": 8 * s, "b-and-c": 5 * s, "untaken": Forever, "other": 4 * s}},
		{"never renewed, nobody promised", Standing{Now: 5 * s},
			map[volume.ID]time.Duration{"b-only": 5 * s, "b-and-c": 5 * s, "untaken": Forever, "other": 0}},
	}
	for _, c := range cases {
		p := cfg.Grant(c.st, terms, free)
		if p.Margin != cfg.Margin {
			t.Errorf("%s: margin %s", c.name, p.Margin)
		}
		for id, want := range c.want {
			got := p.Deadline(id)
			if got != want {
				t.Errorf("%s: %s may write until %s, want %s", c.name, id, got, want)
			}
			// The watchdog fences exactly where the guard does.
			v := Decide(c.st, nil)
			for _, term := range terms {
				if term.Volume == id {
					v = Decide(c.st, term.Takers)
				}
			}
			guardFences := !v.MayWrite || (id == "other" && c.st.Now >= c.st.LeaseUntil)
			if w := Watch(WatchInput{Published: true, Permit: p, Volume: id, Now: c.st.Now, Poll: 100 * ms}); w.Fence != guardFences {
				t.Errorf("%s: %s: the watchdog fences: %v, the guard: %v", c.name, id, w.Fence, guardFences)
			}
		}
	}
}

// The permit granted at a renewal sent at `sent` (held until Held(sent))
// and never renewed again: a watchdog looking as Watch says, started at
// any instant before that deadline, has started its fence at least 1.5 margins before any observer
// may take the node for lost (Duration + Margin from its first sighting
// of that renewal, no earlier than it was sent).
func TestTheWatchdogFencesAtLeastAMarginAndAHalfBeforeAnyObserverMayTakeTheNodeForLost(t *testing.T) {
	c := Config{Renew: s, Duration: 5 * s, Margin: 500 * ms}
	for sent := time.Duration(0); sent < 3*s; sent += 70 * ms {
		p := c.Grant(Standing{Now: sent, LeaseUntil: c.Held(sent)}, []Term{{Volume: "v", Takers: []replica.Node{"b"}}}, nil)
		for start := sent; start <= c.Held(sent); start += 130 * ms {
			now := start
			for {
				v := Watch(WatchInput{Published: true, Permit: p, Volume: "v", Now: now, Poll: 2 * s})
				if v.Fence {
					break
				}
				now += v.Next
			}
			for seen := sent; seen < sent+2*s; seen += 100 * ms {
				if fence := now; c.Lost(seen, fence+c.Margin+c.Margin/2-1) {
					t.Fatalf("renewal sent at %s, seen at %s, watchdog from %s: fences at %s, less than 1.5 margins before the node may be taken for lost", sent, seen, start, fence)
				}
			}
		}
	}
}
