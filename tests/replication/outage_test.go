//go:build replication

package replication

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
)

// The shared state goes away for several seconds (the API server during a
// control-plane upgrade; here its file is replaced by a directory, so every
// read and write fails): the primary keeps snapshotting, the secondaries
// keep fetching from it over mTLS, and nobody writes the state. Once it is
// back, every replica reports what it holds.
func TestTheSecondariesKeepFetchingWhileTheSharedStateCannotBeRead(t *testing.T) {
	c := newVolume(t, "vol-outage", 2)
	c.write("a", "first.bin", 4<<20)
	for _, n := range nodes {
		c.start(n)
	}
	c.converged("a", "b", "c")
	c.eventually("b and c reported a's snapshot", 30*time.Second, func() bool {
		st, _ := c.state.Get(ctx, c.id)
		a, _ := st.Replica("a")
		b, _ := st.Replica("b")
		cc, _ := st.Replica("c")
		return a.Snapshot != 0 && b.Holds() == c.newestStored("b") && cc.Holds() == c.newestStored("c") && b.Ready && cc.Ready
	})
	before, err := c.state.Get(ctx, c.id)
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(c.stateDir, string(c.id)+".json")
	if err := os.Rename(file, file+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o755); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := os.Remove(file); err != nil {
			t.Errorf("restoring the state: %v", err)
		}
		if err := os.Rename(file+".away", file); err != nil {
			t.Errorf("restoring the state: %v", err)
		}
	}
	t.Cleanup(restore)
	down := time.Now()
	c.eventually("b and c act on a stale view", 20*time.Second, func() bool {
		sb, errb := c.statusOf("b")
		sc, errc := c.statusOf("c")
		return errb == nil && errc == nil && sb.StaleView && sc.StaleView
	})
	// The pod on a writes on: each write reaches b and c within a few
	// snapshot intervals (1 s here), the state still away.
	var last replica.Snap
	for i := 1; i <= 3; i++ {
		prev := c.newestStored("b")
		c.write("a", fmt.Sprintf("outage-%d.bin", i), 2<<20)
		c.eventually(fmt.Sprintf("b's and c's newest snapshot advance past %s during the outage", replica.SnapshotName(prev)), 30*time.Second, func() bool {
			nb, nc := c.newestStored("b"), c.newestStored("c")
			return nb.Newer(prev) && nc.Newer(prev)
		})
		last = c.newestStored("b")
		t.Logf("%s after the state went away, b holds %s", time.Since(down).Round(100*time.Millisecond), replica.SnapshotName(last))
	}
	sum := c.converged("a", "b", "c")
	if !c.logHas("b", "snapshot received", `"staleView":true`) || !c.logHas("c", "snapshot received", `"staleView":true`) {
		t.Error("no fetch on a stale view in b's or c's log")
	}
	if last.Epoch != before.Epoch {
		t.Errorf("a snapshotted in epoch %d during the outage, the volume's is %d", last.Epoch, before.Epoch)
	}
	if away, err := os.ReadFile(file + ".away"); err != nil || len(away) == 0 {
		t.Fatalf("the state moved away: %v", err)
	}
	t.Logf("outage of %s: b and c hold a's data (checksum %s) up to %s", time.Since(down).Round(100*time.Millisecond), sum, replica.SnapshotName(last))

	restore()
	st, err := c.state.Get(ctx, c.id)
	if err != nil || st.Version != before.Version {
		t.Fatalf("the state was written during the outage: %+v, %v (before: version %s)", st, err, before.Version)
	}
	// The primary snapshots every interval on (zfs-fuse cannot tell an
	// idle interval), so on a loaded machine a secondary's report can
	// trail its store by a snapshot at every look: what is checked is
	// that every replica reports at least what it held when the state
	// came back.
	held := map[replica.Node]replica.Snap{}
	for _, n := range nodes {
		held[n] = c.newestStored(n)
	}
	c.eventually("every replica reported at least what it held when the state came back", 30*time.Second, func() bool {
		st, _ := c.state.Get(ctx, c.id)
		for _, n := range nodes {
			r, _ := st.Replica(n)
			if r.Snapshot == 0 || held[n].Newer(r.Holds()) || !r.Ready {
				return false
			}
		}
		b, _ := st.Replica("b")
		return !last.Newer(b.Holds())
	})
	// Nothing was replaced (a full copy again: history lost). A roll
	// back may happen and is no loss: once the state reads again the
	// primary retains as usual, and when it snapshots Keep times before a
	// secondary's report lands (a loaded machine), the snapshots that
	// secondary fetched unreported are pruned at the primary; it rolls
	// them back to its reported base, ancestors of the primary's newest,
	// and fetches again (ARCHITECTURE 5.6, step 9).
	for _, n := range []replica.Node{"b", "c"} {
		if c.logHas(n, "replacing") {
			t.Errorf("%s replaced its copy across the outage: %v; the primary's retention: %v", n, c.logEntries(n, "replacing"), c.logEntries("a", "old snapshots destroyed"))
		}
		if c.logHas(n, "rolling back") {
			t.Logf("%s rolled back snapshots the primary pruned before its report landed", n)
		}
	}
}
