package replica

import (
	"strings"
	"testing"
)

// runLines feeds script commands (see TestMachineScripts) to env and
// returns what they printed.
func runLines(t *testing.T, env *scriptEnv, lines ...string) string {
	t.Helper()
	var all strings.Builder
	for _, l := range lines {
		env.out = &strings.Builder{}
		if err := env.run(strings.Fields(l)); err != nil {
			env.out.WriteString("error: " + err.Error() + "\n")
		}
		all.WriteString("> " + l + "\n" + env.out.String())
	}
	return all.String()
}

func newScriptEnv() *scriptEnv {
	return &scriptEnv{machines: map[Node]*Machine{}, local: map[Node][]Snap{}, guid: 100, failNext: map[Node][2]string{},
		dirty: map[Node]bool{}, slow: map[Node]bool{}, inFlight: map[Node]Action{}, decided: map[Node]Action{}, canTell: map[Node]bool{}, blind: map[Node]bool{}}
}

// The primary a dies while its two secondaries are receiving its newest
// snapshot (they fetch every snapshot, so with a short interval or a busy
// volume a transfer is in flight most of the time). Both recorded 4 as
// their fetch target before the transfer started; the transfers fail with
// a. Nothing ever clears those targets (Report clears one only when a
// snapshot at least as new is reported, and 4 lived only on a), and
// Takeover counts every other replica's target as held: b is refused
// because of c's target, c because of b's. No replica can ever take over:
// the volume is stuck without a primary after the node loss that takeover
// exists for.
func TestTakeoverIsPossibleAfterThePrimaryDiedWhileBothSecondariesWereFetching(t *testing.T) {
	env := newScriptEnv()
	trace := runLines(t, env,
		"state rf=1 epoch=1 primary=",
		"machine a every=1 keep=2",
		"machine b lag=1",
		"machine c lag=1",
		"local a 1@1:11",
		"local b 1@1:11",
		"local c 1@1:11",
		"stabilize",
		"promote a",
		"ack a",
		"tick",
		"stabilize", // a snapshots 2 of epoch 2, b and c receive it
		"tick a",
		"step a", // a snapshots 3 of epoch 2
		"slow b",
		"slow c",
		"step b",
		"step c",
	)
	// a's node dies: its store is out of reach (it lists nothing), its
	// machine is gone, the transfers in flight fail.
	delete(env.machines, "a")
	trace += runLines(t, env,
		"local a",
		"finish b",
		"finish c",
	)
	for i := 0; i < 5; i++ {
		trace += runLines(t, env, "tick", "stabilize")
	}
	trace += runLines(t, env, "print")
	t.Log(trace)
	b, _ := env.state.Replica("b")
	c, _ := env.state.Replica("c")
	if !b.Ready || !c.Ready {
		t.Fatalf("setup: b and c should be ready (lag 1): b %+v c %+v", b, c)
	}
	s1, s2 := cloneState(env.state), cloneState(env.state)
	errB := Takeover(&s1, "b", "a", 1)
	errC := Takeover(&s2, "c", "a", 1)
	if errB != nil && errC != nil {
		t.Fatalf("no replica can ever take over from the dead primary a (fetch targets b=%v c=%v are never cleared):\n  b: %v\n  c: %v",
			b.Fetching, c.Fetching, errB, errC)
	}
}
