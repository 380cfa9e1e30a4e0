//go:build cluster

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"
)

// holdersOf counts the entries holding a snapshot at least as new as
// after, and says who they are.
func holdersOf(rv rvStatus, after int64) (int, string) {
	n, who := 0, []string{}
	for _, r := range rv.Status.Replicas {
		if r.Snapshot >= after {
			n++
			who = append(who, fmt.Sprintf("%s@%d ready=%v", r.Node, r.Snapshot, r.Ready))
		}
	}
	return n, strings.Join(who, " ")
}

// kubectl drain of a secondary's node: the budget lets its pod go, its
// copy stays until a new replica on the third node caught up (never fewer
// than two copies of the newest snapshot), the rebuild's rate is printed,
// and once the node is back the surplus copy goes: two copies, the pod's
// bytes in each.
func TestDrainingASecondarysNodeRebuildsOnTheThirdAndNeverDropsACopy(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("data", "256Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "writer", "data", "")
	vol := volumeOf(t, ns, "data")
	const kib = 64 * 1024
	sum := writeRandom(t, ns, "writer", "blob", kib)
	after := primarySnapshot(t, vol, node) + 1 // the first snapshot taken after the write
	var second string
	eventually(t, "a secondary holds a snapshot taken after the write, ready", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node != node && r.Snapshot >= after && r.Ready {
				second = r.Node
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})

	hash := sha256.Sum256([]byte(vol))
	sel := "ferry.zfs.csi.io/volume=" + hex.EncodeToString(hash[:20])
	t.Cleanup(func() { _, _ = kubectl(t, "", "uncordon", second) })
	start := time.Now()
	// Only the volume's pods are drained: the other tests' pods stay.
	must(t, "", "drain", second, "--pod-selector", sel, "--ignore-daemonsets", "--timeout=180s")
	var third string
	eventually(t, "a new replica on the third node holds the snapshot, ready", 300*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil {
			return false, err.Error()
		}
		if n, who := holdersOf(rv, after); n < 2 {
			t.Fatalf("only %d copies of snapshot %d or newer during the drain: %s", n, after, who)
		}
		for _, r := range rv.Status.Replicas {
			if r.Node != node && r.Node != second && r.Snapshot >= after && r.Ready {
				third = r.Node
				return true, ""
			}
		}
		_, who := holdersOf(rv, after)
		return false, who
	})
	took := time.Since(start)
	fmt.Printf("rebuild: %.1f MB/s (%d MiB written, ready on %s %.1f s after the drain began)\n",
		float64(kib)*1024/1e6/took.Seconds(), kib/1024, third, took.Seconds())
	if got := hostChecksum(t, third, vol, "blob"); got != sum {
		t.Fatalf("the rebuilt copy on %s reads %s, the pod wrote %s", third, got, sum)
	}

	must(t, "", "uncordon", second)
	eventually(t, "back to two copies, each with the pod's bytes", 300*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil {
			return false, err.Error()
		}
		if n, who := holdersOf(rv, after); n < 2 {
			t.Fatalf("only %d copies of snapshot %d or newer while settling: %s", n, after, who)
		}
		_, who := holdersOf(rv, after)
		if len(rv.Status.Replicas) != 2 {
			return false, who
		}
		for _, r := range rv.Status.Replicas {
			if got := hostChecksum(t, r.Node, vol, "blob"); got != sum {
				return false, fmt.Sprintf("%s reads %s", r.Node, got)
			}
		}
		for _, n := range []string{node, second, third} {
			listed := strings.Contains(who, n+"@")
			if !listed && datasetExists(t, n, vol) {
				return false, fmt.Sprintf("%s still holds an unlisted copy (%s)", n, who)
			}
		}
		return true, ""
	})
}
