//go:build cluster

package e2e

import (
	"strings"
	"testing"
)

// The quickstart's claim (docs/quickstart.md, step 4) and what it says to
// watch (step 5), run as the page writes them (tests/cluster/quickstart.sh):
// its pod runs, its volume gets its two copies, and the watch commands
// show the volume. (Step 3 is how make cluster-deploy installs Ferry, step
// 6 how make e2e-uninstall removes it.)
func TestTheQuickstartsReplicatedClaimRunsAndItsWatchCommandsShowIt(t *testing.T) {
	ns := namespace(t)
	t.Cleanup(func() { _, _ = kubectl(t, "", "delete", "storageclass", "replicated", "--ignore-not-found") })
	quickstart(t, ns, "claim")
	vol := volumeOf(t, ns, "data")
	if vol == "" {
		t.Fatal("the quickstart's claim is not bound")
	}
	waitReady(t, vol)
	if rv, err := getRV(t, vol); err != nil || rv.Spec.ReplicationFactor != 2 {
		t.Fatalf("the quickstart's volume %s: %+v, %v: want a replication factor of 2", vol, rv, err)
	}
	out := quickstart(t, ns, "watch")
	if !strings.Contains(out, vol) {
		t.Fatalf("the quickstart's watch commands do not show the volume %s:\n%s", vol, out)
	}
	if log := must(t, "", "-n", ns, "exec", "writer", "--", "cat", "/data/log"); strings.TrimSpace(log) == "" {
		t.Fatal("the quickstart's pod wrote nothing to its volume")
	}
}
