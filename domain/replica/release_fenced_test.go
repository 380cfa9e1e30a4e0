package replica

import "testing"

// A release races a takeover: a takes its final snapshot (its last writes
// before unpublish), then b takes over (a's lease ran out meanwhile), so
// a's Demote is fenced. The machine counts the fenced step-down as a
// finished release: Released() says "the final snapshot is recorded and
// this replica is no longer the active primary", yet the final snapshot is
// recorded nowhere and b, the new primary, does not hold it; when a next
// plans against b it rolls it back. Unpublish would answer OK for writes
// that are about to be discarded.
func TestAReleaseFencedByATakeoverIsNotReportedAsReleasedWithItsFinalSnapshot(t *testing.T) {
	env := newScriptEnv()
	trace := runLines(t, env,
		"state rf=1 epoch=1 primary=",
		"machine a every=100",
		"machine b lag=1",
		"local a 1@1:11",
		"local b 1@1:11",
		"stabilize",
		"promote a",
		"write a",
		"release a",
		"step a 1", // the final snapshot 2 of epoch 2
		"takeover b a",
		"step a 1", // StepDown(2, 2@2) on the newest state: fenced
		"print",
	)
	t.Log(trace)
	m := env.machines["a"]
	a, _ := env.state.Replica("a")
	b, _ := env.state.Replica("b")
	final := env.local["a"][len(env.local["a"])-1]
	if m.Released() && a.Holds() != final && !env.holds("b", final) {
		t.Fatalf("a reports its release finished, but its final snapshot %v is recorded nowhere (a's entry %v, b's %v) and only a holds it",
			final, a.Holds(), b.Holds())
	}
}
