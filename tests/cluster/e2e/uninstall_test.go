//go:build cluster

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Uninstalling the driver (kubectl delete -k deploy/, the README's
// Uninstall step 1) destroys no copy and keeps every ReplicatedVolume
// (deploy/crds stays); installing it again brings the volume back with
// its data, from the same copies (no transfer). It deletes and re-creates
// the driver: make e2e-uninstall runs it alone, last.
func TestUninstallingTheDriverAndInstallingItAgainBringsBackEveryVolume(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("keep"), "-n", ns, "apply", "-f", "-")
	pod, _ := podOf(t, ns, "keep", 120*time.Second)
	vol := volumeOf(t, ns, "data-keep-0")
	blob := writeRandom(t, ns, pod, "blob", 2048)
	waitReady(t, vol)
	last := writeRandom(t, ns, pod, "last", 64)
	must(t, "", "-n", ns, "scale", "statefulset", "keep", "--replicas=0")
	copies := map[string]string{} // node -> its copy's guid
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
		return true, ""
	})

	start := time.Now()
	must(t, "", "delete", "-k", "../../../deploy", "--ignore-not-found", "--wait=true", "--timeout=300s")
	eventually(t, "the driver's namespace is gone", 300*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "get", "namespace", "ferry-system")
		return err != nil && strings.Contains(err.Error(), "NotFound"), out
	})
	t.Logf("driver uninstalled in %s", time.Since(start).Round(100*time.Millisecond))
	if _, err := getRV(t, vol); err != nil {
		t.Fatalf("the uninstall took the ReplicatedVolume: %v", err)
	}
	for node, guid := range copies {
		if !datasetExists(t, node, vol) || datasetGUID(t, node, vol) != guid {
			t.Fatalf("the uninstall destroyed or replaced %s's copy", node)
		}
	}

	cmd := exec.Command("../deploy.sh")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("installing the driver again: %v", err)
	}
	// The pod goes back to a copy's node. (The PV's node affinity also
	// names the node the volume was created on, whose copy may have left
	// as surplus when the pod stopped: a pod scheduled there is refused,
	// NoReplicaHere. Not this test's subject: see the stop note.)
	for _, n := range strings.Fields(must(t, "", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")) {
		if _, held := copies[n]; !held {
			cordon(t, n)
		}
	}
	must(t, "", "-n", ns, "scale", "statefulset", "keep", "--replicas=1")
	pod, node := podOf(t, ns, "keep", 180*time.Second)
	for file, want := range map[string]string{"blob": blob, "last": last} {
		if got := checksum(t, ns, pod, file); got != want {
			t.Fatalf("after the reinstall %s reads %s on %s, the pod wrote %s", file, got, node, want)
		}
	}
	waitReady(t, vol)
	for n, guid := range copies {
		if got := datasetGUID(t, n, vol); got != guid {
			t.Fatalf("%s's copy was received again after the reinstall (guid %s, was %s)", n, got, guid)
		}
	}
}
