package app_test

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// REVIEW: NeedsLocal assumes only the machine's own actions change the
// pool. Another leaver of the same copy (the daemon's LeaveHere for a copy
// it found without a pod, racing a pod that is just starting; or an
// operator) destroys the copy and removes the entry; the running volume
// manager is woken by the change, sees itself unlisted and re-joins
// reporting the snapshot it listed before, which its pool no longer
// holds. Until the next resync (5 min) every other replica's Leave counts
// this phantom copy.
func TestReviewAVolumeManagerRejoinsWithACopyItNoLongerHolds(t *testing.T) {
	c := newCluster(t, 2, "a", "b", "c")
	c.write("a", "v1")
	for _, n := range []replica.Node{"a", "b", "c"} {
		c.startWith(n, func(cfg *app.ReplicatorConfig) { cfg.SnapshotInterval = time.Hour })
	}
	c.reps["a"].SnapshotNow()
	c.eventually("b and c hold v1 and are ready", func() bool {
		st, _ := c.state.Get(ctx, volID)
		pb, _ := st.Replica("b")
		pc, _ := st.Replica("c")
		return c.holds("b", "v1") && c.holds("c", "v1") && pb.Ready && pc.Ready
	})
	time.Sleep(50 * time.Millisecond) // c idle: Wake < 0, its listing is not refreshed
	if err := app.LeaveHere(ctx, "c", volID, c.stores["c"], c.state, c.events, zap.NewNop()); err != nil {
		t.Fatalf("LeaveHere: %v", err)
	}
	if _, err := c.stores["c"].GetVolume(ctx, volID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("c's copy not destroyed: %v", err)
	}
	time.Sleep(200 * time.Millisecond) // c's volume manager reacts to the change
	st, _ := c.state.Get(ctx, volID)
	pc, listed := st.Replica("c")
	if _, err := c.stores["c"].GetVolume(ctx, volID); listed && pc.Snapshot != 0 && errors.Is(err, ports.ErrNotFound) {
		t.Errorf("BUG: the list claims c holds snapshot %d (ready %v) while c's pool holds no copy: %+v", pc.Snapshot, pc.Ready, st)
	}
	t.Logf("c: listed %v %+v", listed, pc)
	// b is drained: the safe-deletion rule counts a and the phantom c.
	rb := c.reps["b"]
	c.stop("b")
	_, cerr := c.stores["c"].GetVolume(ctx, volID)
	if err := rb.Terminate(ctx, false); err == nil && errors.Is(cerr, ports.ErrNotFound) {
		t.Errorf("BUG (data): b left and destroyed its copy; only a holds the newest snapshot while the factor is 2")
	}
}
