package replication_test

import (
	"testing"
	"time"
)

// REVIEW: a replica that left a volume being deleted (its copy destroyed)
// never settles again: Next returns early on m.left without setting
// settled, so Wake() is 0 for ever and Run re-reads the shared state every
// tick until its pod is deleted, which for a pod owned by the
// ReplicatedVolume is when the last replica (maybe on a node that is down)
// has left.
func TestAReplicaThatLeftReadsTheStateEveryTick(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds a's data", func() bool { return c.holds("b", "v1") })
	c.stop("a")
	c.stop("b") // b's node is down: its entry holds the deletion
	state := &countingState{Store: c.state}
	_ = c.runIdle("a", state, c.stores["a"])
	if err := c.state.Delete(ctx, volID); err != nil {
		t.Fatal(err)
	}
	c.eventually("a left", func() bool {
		st, err := c.state.Get(ctx, volID)
		_, listed := st.Replica("a")
		return err == nil && !listed
	})
	time.Sleep(50 * time.Millisecond)
	before := state.gets.Load()
	time.Sleep(100 * 5 * time.Millisecond) // 100 ticks, nothing changes
	if g := state.gets.Load() - before; g > 5 {
		t.Fatalf("BUG: a replica that left read the unchanged state %d times in 100 ticks", g)
	}
}
