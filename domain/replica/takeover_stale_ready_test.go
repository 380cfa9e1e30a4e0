package replica

import "testing"

// Takeover trusts the successor's Ready flag, which is only what that
// replica last reported. b reported ready at snapshot 1 and then went down
// (its node rebooted, or it was cut off from the shared state): its flag
// stays true while the primary a snapshots and reports 2..6. Then a's node
// is lost and b comes back: Takeover(b, a) succeeds although b is five
// reported snapshots behind (Takeover skips lost's entry and never
// recomputes readiness). When a returns, its 2..6 of epoch 2 are older
// than b's first snapshot of epoch 3, so a rolls them back: writes that
// were snapshotted and reported are destroyed on the only store that held
// them. The invariant table says "a takeover gives up at most what was
// never reported".
func TestTakeoverByAReplicaWhoseReadyFlagIsStaleLosesReportedSnapshots(t *testing.T) {
	env := newScriptEnv()
	trace := runLines(t, env,
		"state rf=1 epoch=1 primary=",
		"machine a every=1 keep=2",
		"machine b lag=1",
		"local a 1@1:11",
		"local b 1@1:11",
		"stabilize",
		"promote a",
		"step a",
	)
	bm := env.machines["b"]
	delete(env.machines, "b") // b's node goes down; its entry says ready
	for i := 0; i < 5; i++ {
		trace += runLines(t, env, "tick", "step a")
	}
	trace += runLines(t, env, "print")
	newestOnA := env.local["a"][len(env.local["a"])-1]
	st := cloneState(env.state)
	err := Takeover(&st, "b", "a", 1)
	t.Log(trace)
	if err == nil {
		// Carry on to show what is lost: b takes over, a comes back.
		env.state = st
		delete(env.machines, "a")
		env.machines["b"] = bm
		trace = runLines(t, env, "tick", "stabilize", "tick", "stabilize")
		env.machines["a"] = NewMachine(MachineConfig{Self: "a", Keep: 2, SnapshotEvery: 1})
		trace += runLines(t, env, "tick", "stabilize", "print")
		t.Log(trace)
		held := false
		for _, n := range []Node{"a", "b"} {
			held = held || env.holds(n, newestOnA)
		}
		t.Fatalf("b, 5 reported snapshots behind a's %v with a stale Ready flag, took over; afterwards %v is held by nobody: %v",
			newestOnA, newestOnA, map[bool]string{true: "still held", false: "destroyed"}[held])
	}
}
