package replication_test

import (
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

// What a volume manager reports of itself (its metrics): what it did, and
// how far its copy is behind the volume's newest snapshot and since when.
func TestAReplicasStatusCountsItsWorkAndSaysHowFarBehindItIs(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1", func() bool { return c.holds("b", "v1") })
	c.eventually("b reports the newest snapshot as its own", func() bool {
		s := c.reps["b"].Status()
		return s.HoldsNewest && s.Behind == 0 && s.Volume.Ready == 2 && s.ReplicationFactor == 2
	})
	a, b := c.reps["a"].Status(), c.reps["b"].Status()
	if a.Totals.SnapshotsTaken == 0 || b.Totals.SnapshotsTaken != 0 {
		t.Errorf("snapshots taken: a %d, b %d; want some on the primary alone", a.Totals.SnapshotsTaken, b.Totals.SnapshotsTaken)
	}
	if b.Totals.Transfers == 0 || b.Totals.TransferredBytes == 0 || b.Totals.TransferFailures != 0 {
		t.Errorf("b's transfers: %+v; want some, with their bytes, none failed", b.Totals)
	}
	// The time of b's newest snapshot is when a took it: a received
	// snapshot keeps its time.
	list, err := c.stores["a"].ListSnapshots(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	var taken = list[len(list)-1]
	if n, _, _ := replica.ParseSnapshotName(taken.Name); n != b.Snapshot {
		t.Fatalf("a's newest snapshot %s, b reports %d", taken.Name, b.Snapshot)
	}
	if !b.NewestTaken.Equal(taken.CreatedAt) || b.NewestTaken.IsZero() {
		t.Errorf("b's newest snapshot taken at %v, a took it at %v", b.NewestTaken, taken.CreatedAt)
	}
	// Both say so in the shared state, for `kubectl get rv`'s age column.
	c.eventually("the shared state says when the newest snapshot was taken", func() bool {
		st, err := c.state.Get(ctx, volID)
		return err == nil && replica.Summarize(st, false).NewestTaken == taken.CreatedAt.Unix()
	})

	// b stops; a snapshots twice more: b's last view (when it stopped)
	// is what it reports, and once started again it catches up.
	c.stop("b")
	c.write("a", "v2")
	c.eventually("a snapshots v2", func() bool { return c.reps["a"].Status().Totals.SnapshotsTaken > a.Totals.SnapshotsTaken })
	st, err := c.state.Get(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	if behind, holds := replica.LagOf(st, "b"); behind == 0 || holds {
		t.Errorf("b stopped, a snapshotted: LagOf(b) = %d, %v; want behind", behind, holds)
	}
}
