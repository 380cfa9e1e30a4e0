package liveness

import (
	"strings"
	"testing"
	"time"
)

func TestAStoppingDaemonKeepsItsNodeUntilTheDaemonReplacingItHasStarted(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	const grace = 300 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	in := func(s NextDaemon, readAt, now time.Duration) HandoverInput {
		r, found := time.Time{}, time.Time{}
		if readAt >= 0 {
			r = at(readAt)
			if s.Found {
				found = r
			}
		}
		return HandoverInput{Next: s, ReadAt: r, FoundAt: found, Now: at(now), Since: t0, Margin: 35 * time.Second, Unread: 10 * time.Second, Absent: 2 * time.Second}
	}
	pulling := NextDaemon{Deleting: true, Grace: grace, Found: true, Pod: "ferry-node-new"}
	started := pulling
	started.Running = true
	none := NextDaemon{Deleting: true, Grace: grace}
	foundEarlier := in(none, 60*time.Second, 60*time.Second)
	foundEarlier.FoundAt = at(59 * time.Second)
	cases := []struct {
		name string
		in   HandoverInput
		hold bool
		why  string
	}{
		{"no successor yet: look again a moment (its controller may be making it)", in(none, 0, 0), true, "looking again"},
		{"no successor for a while (uninstall, node removed): stop", in(none, 2*time.Second, 2*time.Second), false, "nothing to hand"},
		{"the successor gone a moment after it was seen (deleted, made again): look again", foundEarlier, true, "looking again"},
		{"the own pod or the rights gone: stop at once", in(NextDaemon{Gone: true}, 0, 0), false, "gone"},
		{"the own pod not being deleted (node shutdown, a kill): stop at once", in(NextDaemon{Found: true, Pod: "ferry-node-new", Grace: grace}, 0, 0), false, "not being deleted"},
		{"the successor not started (unscheduled, pulling): hold", in(pulling, 0, 0), true, "has not started its daemon"},
		{"still pulling a while later: hold", in(pulling, 200*time.Second, 200*time.Second), true, "has not started its daemon"},
		{"the successor's daemon started: stop", in(started, 5*time.Second, 5*time.Second), false, "has started"},
		{"the grace period less the margin reached: stop", in(pulling, 265*time.Second, 265*time.Second), false, "grace period"},
		{"just before it: hold", in(pulling, 264*time.Second, 264*time.Second), true, "has not started"},
		{"a grace of nothing: stop", in(NextDaemon{Deleting: true, Found: true, Pod: "ferry-node-new"}, 0, 0), false, "grace period"},
		{"never read yet: look again", in(NextDaemon{}, -1, 3*time.Second), true, "cannot be read"},
		{"never read for long: stop", in(NextDaemon{}, -1, 10*time.Second), false, "could not be read"},
		{"read once, then unreadable but recently: the last read holds", in(pulling, 60*time.Second, 65*time.Second), true, "has not started"},
		{"read once, then unreadable for long: stop", in(pulling, 60*time.Second, 70*time.Second), false, "could not be read"},
	}
	for _, c := range cases {
		v := Handover(c.in)
		if v.Hold != c.hold || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: hold %v (%s), want %v (%q)", c.name, v.Hold, v.Reason, c.hold, c.why)
		}
	}
}
