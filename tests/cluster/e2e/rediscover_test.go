//go:build cluster

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A ReplicatedVolume lost while its copies remain (deleted as Ferry's
// daemon, its finalizer removed by hand): no copy is destroyed, the
// daemons rebuild the state from the copies (every node answering what it
// holds), and the claim's pod runs again with its data, from the same
// copies.
func TestALostReplicatedVolumeIsRebuiltFromItsCopies(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("lost"), "-n", ns, "apply", "-f", "-")
	pod, _ := podOf(t, ns, "lost", 120*time.Second)
	vol := volumeOf(t, ns, "data-lost-0")
	blob := writeRandom(t, ns, pod, "blob", 2048)
	waitReady(t, vol)
	last := writeRandom(t, ns, pod, "last", 64)
	must(t, "", "-n", ns, "scale", "statefulset", "lost", "--replicas=0")
	copies := map[string]string{} // node -> its copy's guid
	var epoch int64
	eventually(t, "with no pod, both copies hold the last write", 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil || activeCount(rv) != 0 || len(rv.Status.Replicas) != 2 {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		for _, r := range rv.Status.Replicas {
			if got := hostChecksum(t, r.Node, vol, "last"); got != last {
				return false, fmt.Sprintf("%s's last: %s, want %s", r.Node, got, last)
			}
			copies[r.Node] = datasetGUID(t, r.Node, vol)
		}
		epoch = rv.Status.Epoch
		return true, ""
	})

	// Lost: deleted (as the daemon, the one identity the policy lets),
	// without Ferry's mark, and its finalizer removed by an administrator.
	must(t, "", "--as=system:serviceaccount:ferry-system:ferry-node", "delete", "rv", vol, "--wait=false")
	must(t, "", "patch", "rv", vol, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	eventually(t, "the state is rebuilt from the copies, both answering", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil {
			return false, err.Error()
		}
		out, _ := kubectl(t, "", "get", "rv", vol, "-o", "jsonpath={.status.awaiting}")
		return len(rv.Status.Replicas) == 2 && strings.TrimSpace(out) == "" && rv.Status.Epoch > epoch, fmt.Sprintf("%+v awaiting %q", rv.Status, out)
	})
	for node, guid := range copies {
		if !datasetExists(t, node, vol) || datasetGUID(t, node, vol) != guid {
			t.Fatalf("%s's copy was destroyed or replaced while its state was lost", node)
		}
	}
	// Back on a copy's node (the PV's node affinity also names the node
	// the volume was created on, whose copy may have left as surplus).
	for _, n := range strings.Fields(must(t, "", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		if _, held := copies[n]; !held {
			cordon(t, n)
		}
	}
	must(t, "", "-n", ns, "scale", "statefulset", "lost", "--replicas=1")
	pod, node := podOf(t, ns, "lost", 180*time.Second)
	for file, want := range map[string]string{"blob": blob, "last": last} {
		if got := checksum(t, ns, pod, file); got != want {
			t.Fatalf("after the rebuild %s reads %s on %s, the pod wrote %s", file, got, node, want)
		}
	}
	writeRandom(t, ns, pod, "after", 16)
	waitReady(t, vol)
}
