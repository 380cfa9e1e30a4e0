package replication_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
)

// REVIEW: NeedsLocal assumes only the machine's own actions change the
// pool. Another leaver of the same copy (the daemon's LeaveHere for a copy
// it found without a pod, racing a pod that is just starting; or an
// operator) destroys the copy and removes the entry; the running volume
// manager is woken by the change, sees itself unlisted and re-joins
// reporting the snapshot it listed before, which its pool no longer
// holds. Until the next resync (5 min) every other replica's Leave counts
// this phantom copy.
func TestAVolumeManagerRejoinsWithACopyItNoLongerHolds(t *testing.T) {
	c := newCluster(t, 2, "a", "b", "c")
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b", "c"} {
		c.startWith(n, func(cfg *replication.Config) { cfg.SnapshotInterval = time.Hour })
	}
	c.reps["a"].SnapshotNow()
	c.eventually("b and c hold v1 and are ready", func() bool {
		st, _ := c.state.Get(ctx, volID)
		pb, _ := st.Replica("b")
		pc, _ := st.Replica("c")
		return c.holds("b", "v1") && c.holds("c", "v1") && pb.Ready && pc.Ready
	})
	// c idle (Wake < 0): its view of its pool is not refreshed. It is
	// stopped while its copy is taken away, then runs on that view.
	c.stop("c")
	c.ticks("c", replication.MaxBackoffTicks)
	if err := replication.LeaveHere(ctx, "c", volID, c.stores["c"], c.state, c.events, zap.NewNop()); err != nil {
		t.Fatalf("LeaveHere: %v", err)
	}
	c.resume("c")
	// c's volume manager, still running, may rejoin and fetch the volume
	// again: that is its right. What it may never do is list a snapshot
	// its pool does not hold. (No new snapshot is taken meanwhile, so
	// reading the list and then the pool is a fair check.)
	holds := func(n replica.Node, s replica.Snap) bool {
		list, _ := c.stores[n].ListSnapshots(ctx, volID)
		for _, x := range list {
			if x.Name == replica.SnapshotName(s) && x.GUID == s.GUID {
				return true
			}
		}
		return false
	}
	// Over a window, on every change of the state: the list never claims
	// a copy c's pool does not hold.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	changes, err := c.state.Watch(wctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	for open := true; open; _, open = <-changes {
		st, _ := c.state.Get(ctx, volID)
		if pc, listed := st.Replica("c"); listed && pc.Snapshot != 0 && !holds("c", pc.Holds()) {
			t.Fatalf("BUG: the list claims c holds snapshot %d (ready %v) while c's pool does not: %+v", pc.Snapshot, pc.Ready, st)
		}
	}
	// b is drained: if the rule lets it go, two others really hold the
	// snapshot it held (c's copy, fetched again, included).
	rb := c.reps["b"]
	c.stop("b")
	st, _ := c.state.Get(ctx, volID)
	pa, _ := st.Replica("a")
	if err := rb.Terminate(ctx); err == nil {
		if !holds("a", pa.Holds()) || !holds("c", pa.Holds()) {
			t.Errorf("BUG (data): b left and destroyed its copy while a and c do not both hold snapshot %d", pa.Snapshot)
		}
	}
}
