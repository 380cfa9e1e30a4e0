package liveness

import (
	"strings"
	"testing"
	"time"
)

func TestAStoppingDaemonKeepsItsNodeUntilTheDaemonReplacingItHasStarted(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	grace := t0.Add(300 * time.Second)
	in := func(read bool, s NextDaemon, now time.Duration) HandoverInput {
		return HandoverInput{Read: read, Next: s, Now: t0.Add(now), Since: t0, Margin: 10 * time.Second, Unread: 10 * time.Second}
	}
	pulling := NextDaemon{Found: true, Pod: "ferry-node-new", GraceEnds: grace}
	cases := []struct {
		name string
		in   HandoverInput
		hold bool
		why  string
	}{
		{"no successor (uninstall, node removed): stop at once", in(true, NextDaemon{GraceEnds: grace}, 0), false, "nothing to hand"},
		{"the successor still pulling its image: hold", in(true, pulling, 0), true, "has not started its daemon"},
		{"still pulling a while later: hold", in(true, pulling, 200*time.Second), true, "has not started its daemon"},
		{"the successor's daemon started: stop", in(true, NextDaemon{Found: true, Pod: "ferry-node-new", Running: true, GraceEnds: grace}, 5*time.Second), false, "has started"},
		{"the grace period about to end: stop", in(true, pulling, 290*time.Second), false, "grace period ends"},
		{"the grace period past: stop", in(true, pulling, 400*time.Second), false, "grace period ends"},
		{"no grace known: hold while pulling", in(true, NextDaemon{Found: true, Pod: "ferry-node-new"}, time.Hour), true, "has not started"},
		{"the pods unreadable: look again", in(false, NextDaemon{}, 3*time.Second), true, "cannot be read"},
		{"the pods unreadable for long: stop", in(false, NextDaemon{}, 10*time.Second), false, "could not be read"},
	}
	for _, c := range cases {
		v := Handover(c.in)
		if v.Hold != c.hold || !strings.Contains(v.Reason, c.why) {
			t.Errorf("%s: hold %v (%s), want %v (%q)", c.name, v.Hold, v.Reason, c.hold, c.why)
		}
	}
}
