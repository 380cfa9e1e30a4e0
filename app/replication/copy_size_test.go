package replication_test

import (
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Every copy is the volume's size: a received copy takes the quota and
// reservation the state records (a receive carries none: once promoted it
// could fill its pool), and an expansion recorded there reaches it.
func TestEveryCopyTakesTheVolumesSizeAndItsExpansions(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { s.CapacityBytes = 1 << 30; return nil }); err != nil {
		t.Fatal(err)
	}
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	size := func(n replica.Node) int64 {
		info, err := c.stores[n].GetVolume(ctx, volID)
		if err != nil {
			return -1
		}
		return info.CapacityBytes
	}
	c.eventually("b holds a's data at the volume's size", func() bool { return c.holds("b", "v1") && size("b") == 1<<30 })
	// The volume is expanded on the primary's node: its size recorded in
	// the state, the primary's copy grown.
	if err := c.stores["a"].Resize(ctx, volID, 2<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { s.CapacityBytes = 2 << 30; return nil }); err != nil {
		t.Fatal(err)
	}
	c.eventually("b's copy grew with the volume", func() bool { return size("b") == 2<<30 })
}

// A copy whose pool cannot hold the volume's size says so and keeps
// replicating.
func TestACopyThatCannotGrowIsReportedAndKeepsReplicating(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { s.CapacityBytes = 64 << 30; return nil }); err != nil {
		t.Fatal(err) // more than b's pool (10 GiB)
	}
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b reports its copy cannot grow", func() bool {
		for _, r := range c.events.reasons() {
			if r == replica.CopyCannotGrow {
				return true
			}
		}
		return false
	})
	c.write("a", "v2")
	c.reps["a"].SnapshotNow()
	c.eventually("b still catches up", func() bool { return c.holds("b", "v2") })
}

// Every copy holds the volume's properties: a received copy has its
// pool's defaults (a stream carries none), so it takes those the state
// records, and a promoted copy runs as its StorageClass said.
func TestEveryCopyTakesTheVolumesProperties(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	want := map[string]string{"atime": "off", "compression": "lz4"}
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { s.Properties = want; return nil }); err != nil {
		t.Fatal(err)
	}
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	props := func(n replica.Node) map[string]string {
		info, err := c.stores[n].GetVolume(ctx, volID)
		if err != nil {
			return nil
		}
		return info.Properties
	}
	c.eventually("b holds a's data with the volume's properties", func() bool {
		got := props("b")
		return c.holds("b", "v1") && got["atime"] == "off" && got["compression"] == "lz4"
	})
}
