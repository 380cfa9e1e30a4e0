package replication_test

import (
	"testing"

	"github.com/ferry-csi/ferry/app/replication"
)

// A replica that left a volume being deleted (its copy destroyed) reads
// nothing more: its pod, owned by the ReplicatedVolume, may live on until
// the last replica (maybe on a node that is down) has left, and must not
// read the shared state every tick meanwhile (Machine.Wake is -1 once
// left).
func TestAReplicaThatLeftReadsNothingMore(t *testing.T) {
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
	// 100 ticks on the test's clock, nothing changing, after those that
	// let a finish what it began (a back-off, its own last write).
	c.stop("a")
	c.ticks("a", replication.MaxBackoffTicks)
	before := state.gets.Load()
	c.ticks("a", 100)
	if g := state.gets.Load() - before; g > 0 {
		t.Fatalf("BUG: a replica that left read the unchanged state %d times in 100 ticks", g)
	}
}
