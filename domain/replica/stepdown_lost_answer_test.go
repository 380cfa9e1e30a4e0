package replica

import (
	"errors"
	"strings"
	"testing"
)

func newHandoverEnv() *scriptEnv {
	return &scriptEnv{machines: map[Node]*Machine{}, local: map[Node][]Snap{}, guid: 100, failNext: map[Node][2]string{},
		dirty: map[Node]bool{}, slow: map[Node]bool{}, inFlight: map[Node]Action{}, decided: map[Node]Action{}, canTell: map[Node]bool{}}
}

// Unpublish on a: the final snapshot is taken, and the compare-and-swap
// that demotes a carrying it is written, but its answer is lost (the API
// server committed the PUT and the connection broke, or the request timed
// out after the write: rvstate returns an error). The machine retries on
// the newest state: a is no longer active there, so it asks only to
// confirm (StepDown epoch 0), and takes that confirmation, with its final
// snapshot taken, for a takeover that overtook the release: it raises a
// Conflict alert ("the writes it holds are not the volume's") and never
// reports the release finished, so the unpublish fails, although the
// state records exactly the final snapshot of a's term as a's, and b
// catches up to it.
func TestAStepDownWhoseAnswerWasLostIsAFinishedReleaseNotALostOne(t *testing.T) {
	env := newHandoverEnv()
	trace := runLines(t, env,
		"state rf=2 epoch=1 primary=",
		"machine a every=100",
		"machine b",
		"local a 1@1:11",
		"local b 1@1:11",
		"stabilize",
		"promote a",
		"stabilize",
		"write a",
		"release a",
		"decide a", // the final snapshot
		"do a",
		"decide a", // step down from epoch 2 carrying it
	)
	a := env.machines["a"]
	sd, ok := env.decided["a"].(StepDown)
	if !ok {
		t.Fatalf("a decided %v, want a step-down\n%s", env.decided["a"], trace)
	}
	delete(env.decided, "a")
	// The write lands...
	if err := env.cas(func(s *State) error { return Demote(s, "a", sd.Epoch, sd.Final) }); err != nil {
		t.Fatal(err)
	}
	// ...and its answer is lost.
	_ = a.Step(ActionDone{Action: sd, Err: errors.New("Put \"https://apiserver/...\": context deadline exceeded")})
	trace += runLines(t, env,
		"tick a",
		"step a",
		"print",
	)
	self, _ := env.state.Replica("a")
	if self.Holds() != sd.Final || self.Active {
		t.Fatalf("the state does not record a's final snapshot: %+v\n%s", self, trace)
	}
	if !a.Released() || a.ReleaseLost() != "" || strings.Contains(trace, "alert") {
		t.Fatalf("a's final snapshot %v is recorded with its demotion, yet released=%v, lost=%q\n%s",
			sd.Final, a.Released(), a.ReleaseLost(), trace)
	}
}
