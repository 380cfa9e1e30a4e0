//go:build cluster

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// datasetGUID is the guid of node's copy of the volume: a copy received
// again in full would be a new dataset with another guid.
func datasetGUID(t *testing.T, node, vol string) string {
	out, err := exec.Command("zfs", "get", "-H", "-o", "value", "guid", "ferry-"+node+"/ferry/"+vol).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs get guid: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// Restarting the node daemon of a secondary's node (its pod deleted, the
// DaemonSet makes another) changes nothing of the volume: the replica pod
// keeps running, the copy is not received again, and it keeps catching up.
func TestRestartingTheDaemonOfASecondarysNodeCopiesNothingAgain(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("data", "64Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "writer", "data", "")
	vol := volumeOf(t, ns, "data")
	sum := writeRandom(t, ns, "writer", "blob", 4096)
	after := primarySnapshot(t, vol, node)
	var second string
	var at int64
	// The copy is read on the host only once it holds a snapshot taken
	// after the write (what it is compared with).
	eventually(t, "a secondary holds a snapshot taken after the write, ready", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node != node && r.Ready && r.Snapshot > after {
				second, at = r.Node, r.Snapshot
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})
	// The copy holds the StorageClass's properties (ferry-rf2: atime off,
	// compression on), not its pool's defaults: a read of a copy whose
	// atime is on changes it, and its next incremental receive is refused.
	eventually(t, "the secondary's copy holds the volume's properties", 60*time.Second, func() (bool, string) {
		out, err := exec.Command("zfs", "get", "-H", "-o", "value", "atime,compression", "ferry-"+second+"/ferry/"+vol).CombinedOutput()
		f := strings.Fields(string(out))
		return err == nil && len(f) == 2 && f[0] == "off" && f[1] == "on", string(out)
	})
	eventually(t, "the secondary's data equals what the pod wrote", 60*time.Second, func() (bool, string) {
		got := hostChecksum(t, second, vol, "blob")
		return got == sum, fmt.Sprintf("%s's blob: %s (want %s)", second, got, sum)
	})
	hash := sha256.Sum256([]byte(vol))
	sel := "ferry.zfs.csi.io/volume=" + hex.EncodeToString(hash[:20])
	podOn := func(n string) string {
		return strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", sel, "--field-selector", "spec.nodeName="+n,
			"-o", "jsonpath={.items[*].metadata.uid}"))
	}
	replicaPod, guid := podOn(second), datasetGUID(t, second, vol)
	if replicaPod == "" {
		t.Fatalf("no replica pod on %s", second)
	}
	daemon := strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node",
		"--field-selector", "spec.nodeName="+second, "-o", "jsonpath={.items[0].metadata.name}"))
	must(t, "", "-n", "ferry-system", "delete", "pod", daemon, "--wait=true", "--timeout=60s")
	eventually(t, "the DaemonSet's new pod on "+second+" is ready", 120*time.Second, func() (bool, string) {
		out := must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node",
			"--field-selector", "spec.nodeName="+second, "-o", "jsonpath={.items[*].status.containerStatuses[*].ready}")
		return strings.TrimSpace(out) == "true true true true", out
	})
	// Two placement periods of the new daemon, and the primary snapshots
	// on (every 2 s): the secondary keeps catching up, incrementally.
	eventually(t, "the secondary holds snapshots taken after the restart", 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node == second && r.Ready && r.Snapshot > at+10 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})
	if got := podOn(second); got != replicaPod {
		t.Fatalf("the replica pod on %s was replaced (%s, was %s)", second, got, replicaPod)
	}
	if got := datasetGUID(t, second, vol); got != guid {
		t.Fatalf("the copy on %s was received again in full (dataset guid %s, was %s)", second, got, guid)
	}
	if got := hostChecksum(t, second, vol, "blob"); got != sum {
		t.Fatalf("the copy on %s reads %s, the pod wrote %s", second, got, sum)
	}
}
