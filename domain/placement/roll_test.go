package placement

import (
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

func TestNextRollRenewsOnePodAtATimeSecondariesFirst(t *testing.T) {
	old := func(name string, primary bool) RollPod {
		return RollPod{Name: name, Node: replica.Node("n-" + name), Primary: primary, Ready: true}
	}
	cases := []struct {
		name string
		pods []RollPod
		want string
	}{
		{"secondaries before the primary", []RollPod{old("a", true), old("c", false), old("b", false)}, "b"},
		{"the primary last", []RollPod{old("a", true), {Name: "b", Current: true, Ready: true}}, "a"},
		{"none while one is not ready", []RollPod{old("a", true), old("c", false), {Name: "b", Current: true}}, ""},
		{"an outdated pod not ready holds the roll too", []RollPod{old("a", true), {Name: "b"}}, ""},
		{"a terminating pod is neither rolled nor waited for", []RollPod{{Name: "a", Terminating: true}, old("b", false)}, "b"},
		{"all current", []RollPod{{Name: "a", Current: true, Ready: true}}, ""},
		{"none while a renewed pod still runs the old version, ready", []RollPod{old("a", true), {Name: "b", Ready: true, Restarting: true}, old("c", false)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := NextRoll(c.pods)
			if r.Pod != c.want || r.Reason == "" {
				t.Fatalf("NextRoll = %+v, want pod %q", r, c.want)
			}
		})
	}
	if r := NextRoll([]RollPod{old("a", false), {Name: "b", Node: "n2"}}); !strings.Contains(r.Reason, "not ready") {
		t.Fatalf("reason %q", r.Reason)
	}
}

func TestTheRollerIsThePrimaryOrTheFirstListedCopy(t *testing.T) {
	s := replica.State{Primary: "b", Replicas: []replica.Replica{{Node: "a"}, {Node: "b"}}}
	if r := Roller(s); r != "b" {
		t.Fatalf("roller %q", r)
	}
	s.Primary = ""
	if r := Roller(s); r != "a" {
		t.Fatalf("roller %q", r)
	}
}
