//go:build cluster

// Package e2e runs Ferry's own checks on the local cluster (make
// test-cluster): real kubelets, scheduler, provisioner and snapshotter.
// Every check reads data back by checksum.
package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	kubectlBin = envOr("KUBECTL", filepath.Join(os.Getenv("HOME"), ".cache/ferry/k8s-v1.37.2/kubectl"))
	kubeconfig = envOr("KUBECONFIG", "/var/lib/ferry-e2e/kubeconfig")
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func must(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(t, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// eventually polls cond every half second until it holds, failing after
// timeout with what it last saw.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s; last seen: %s", timeout, what, seen)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// namespace makes a namespace for one test, deleted at its end.
func namespace(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "ferry-test-" + hex.EncodeToString(b)
	must(t, "", "create", "namespace", ns)
	t.Cleanup(func() {
		if t.Failed() {
			// Compact: CI shows a test's output from its end, and the
			// failure's own line (printed before this) must stay in view.
			out, _ := kubectl(t, "", "-n", ns, "get", "pods,pvc", "-o", "wide")
			ev, _ := kubectl(t, "", "-n", ns, "get", "events", "--sort-by=.lastTimestamp", "-o",
				`jsonpath={range .items[*]}{.lastTimestamp} {.reason} {.involvedObject.kind}/{.involvedObject.name}: {.message}{"\n"}{end}`)
			lines := strings.Split(strings.TrimSpace(ev), "\n")
			if len(lines) > 20 {
				lines = lines[len(lines)-20:]
			}
			for i, l := range lines {
				if len(l) > 200 {
					lines[i] = l[:200] + "…"
				}
			}
			t.Logf("namespace %s at failure (the failure's line is above):\n%s\nits last events:\n%s", ns, out, strings.Join(lines, "\n"))
			saveFailure(t, ns, out+"\n"+ev)
		}
		_, _ = kubectl(t, "", "delete", "namespace", ns, "--wait=true", "--timeout=120s")
	})
	return ns
}

func pvcYAML(name, size, source string) string {
	ds := ""
	if source != "" {
		ds = fmt.Sprintf("  dataSource: {apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: %s}\n", source)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ferry
  resources: {requests: {storage: %s}}
%s`, name, size, ds)
}

// podYAML runs a pod that keeps the claim mounted at /data; node, when
// set, pins it there.
func podYAML(name, claim, node string) string {
	sel := ""
	if node != "" {
		sel = fmt.Sprintf("  nodeSelector: {kubernetes.io/hostname: %s}\n", node)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
%s  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: ferry-test:dev
    imagePullPolicy: Never
    command: [sh, -c, "sleep 100000"]
    volumeMounts: [{name: v, mountPath: /data}]
  volumes: [{name: v, persistentVolumeClaim: {claimName: %s}}]
`, name, sel, claim)
}

func runPod(t *testing.T, ns, name, claim, node string) string {
	t.Helper()
	must(t, podYAML(name, claim, node), "-n", ns, "apply", "-f", "-")
	must(t, "", "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s")
	return strings.TrimSpace(must(t, "", "-n", ns, "get", "pod", name, "-o", "jsonpath={.spec.nodeName}"))
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	must(t, "", "-n", ns, "delete", "pod", name, "--wait=true", "--timeout=120s")
}

// writeRandom writes size bytes of random data to /data/<file> in the pod
// and returns their checksum as the pod reads them back.
func writeRandom(t *testing.T, ns, pod, file string, kib int) string {
	t.Helper()
	must(t, "", "-n", ns, "exec", pod, "--", "sh", "-c", fmt.Sprintf("dd if=/dev/urandom of=/data/%s bs=1024 count=%d 2>/dev/null && sync", file, kib))
	return checksum(t, ns, pod, file)
}

func checksum(t *testing.T, ns, pod, file string) string {
	t.Helper()
	out := must(t, "", "-n", ns, "exec", pod, "--", "sha256sum", "/data/"+file)
	return strings.Fields(out)[0]
}

func volumeOf(t *testing.T, ns, claim string) string {
	return strings.TrimSpace(must(t, "", "-n", ns, "get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}"))
}

// datasetExists reports whether node's pool holds the volume's dataset.
func datasetExists(t *testing.T, node, vol string) bool {
	out, err := exec.Command("zfs", "list", "-H", "-o", "name", "ferry-"+node+"/ferry/"+vol).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "does not exist") {
		t.Fatalf("zfs list: %v: %s", err, out)
	}
	return err == nil
}

func TestAPodsDataOutlivesThePodAndTheClaimsDeletionRemovesTheDataset(t *testing.T) {
	ns := namespace(t)
	must(t, pvcYAML("data", "64Mi", ""), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "writer", "data", "")
	sum := writeRandom(t, ns, "writer", "blob", 4096)
	vol := volumeOf(t, ns, "data")
	if !datasetExists(t, node, vol) {
		t.Fatalf("no dataset ferry-%s/ferry/%s for the bound volume", node, vol)
	}
	deletePod(t, ns, "writer")
	if n := runPod(t, ns, "reader", "data", ""); n != node {
		t.Fatalf("the re-created pod runs on %s, not on %s where its volume is", n, node)
	}
	if got := checksum(t, ns, "reader", "blob"); got != sum {
		t.Fatalf("read back %s, wrote %s", got, sum)
	}
	deletePod(t, ns, "reader")
	must(t, "", "-n", ns, "delete", "pvc", "data", "--wait=true", "--timeout=60s")
	eventually(t, "the volume and its dataset are gone", 120*time.Second, func() (bool, string) {
		_, err := kubectl(t, "", "get", "pv", vol)
		return err != nil && !datasetExists(t, node, vol), fmt.Sprintf("pv: %v, dataset: %v", err, datasetExists(t, node, vol))
	})
}

func TestASnapshotRestoresIntoANewClaim(t *testing.T) {
	ns := namespace(t)
	must(t, pvcYAML("src", "64Mi", ""), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "writer", "src", "")
	sum := writeRandom(t, ns, "writer", "blob", 2048)
	must(t, fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: snap}
spec: {volumeSnapshotClassName: ferry-snapshots, source: {persistentVolumeClaimName: src}}
`), "-n", ns, "apply", "-f", "-")
	eventually(t, "the snapshot is ready", 120*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", ns, "get", "volumesnapshot", "snap", "-o", "jsonpath={.status.readyToUse} {.status.error.message}")
		return strings.HasPrefix(out, "true"), out
	})
	// Overwritten after the snapshot: the restore must not see it.
	writeRandom(t, ns, "writer", "blob", 2048)
	must(t, pvcYAML("restored", "64Mi", "snap"), "-n", ns, "apply", "-f", "-")
	// A restore on the node holding the snapshot.
	runPod(t, ns, "reader", "restored", node)
	if got := checksum(t, ns, "reader", "blob"); got != sum {
		t.Fatalf("the restored volume reads %s, the snapshot held %s", got, sum)
	}
	// And on another node, whose pool lacks it: fetched from the node
	// that holds it, over the peer stream (only the new volume comes).
	other := "node1"
	if node == "node1" {
		other = "node2"
	}
	must(t, pvcYAML("elsewhere", "96Mi", "snap"), "-n", ns, "apply", "-f", "-")
	if got := runPod(t, ns, "far-reader", "elsewhere", other); got != other {
		t.Fatalf("the restore's pod runs on %s, want %s", got, other)
	}
	if got := checksum(t, ns, "far-reader", "blob"); got != sum {
		t.Fatalf("the volume restored on %s reads %s, the snapshot held %s", other, got, sum)
	}
	srcVol := strings.TrimSpace(must(t, "", "-n", ns, "get", "pvc", "src", "-o", "jsonpath={.spec.volumeName}"))
	if datasetExists(t, other, srcVol) {
		t.Fatalf("the source volume %s appeared on %s: the restore should bring the snapshot's data only", srcVol, other)
	}
}

func TestAMountedClaimGrowsOnline(t *testing.T) {
	ns := namespace(t)
	must(t, pvcYAML("data", "64Mi", ""), "-n", ns, "apply", "-f", "-")
	runPod(t, ns, "app", "data", "")
	sum := writeRandom(t, ns, "app", "blob", 1024)
	must(t, "", "-n", ns, "patch", "pvc", "data", "--type=merge", "-p", `{"spec":{"resources":{"requests":{"storage":"192Mi"}}}}`)
	eventually(t, "the claim reports 192Mi", 120*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", ns, "get", "pvc", "data", "-o", "jsonpath={.status.capacity.storage}")
		return out == "192Mi", out
	})
	eventually(t, "the pod sees the larger filesystem", 60*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", ns, "exec", "app", "--", "df", "-kP", "/data")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 2 {
			return false, out
		}
		var kb int64
		fmt.Sscan(strings.Fields(lines[len(lines)-1])[1], &kb)
		return kb >= 180*1024, out
	})
	if got := checksum(t, ns, "app", "blob"); got != sum {
		t.Fatalf("after growing, the data reads %s, not %s", got, sum)
	}
}

func TestASecondPodOnAnotherNodeIsRefusedWithAClearEvent(t *testing.T) {
	ns := namespace(t)
	must(t, pvcYAML("data", "64Mi", ""), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "first", "data", "")
	other := "node1"
	if node == "node1" {
		other = "node2"
	}
	must(t, podYAML("second", "data", other), "-n", ns, "apply", "-f", "-")
	eventually(t, "the second pod is refused, saying why", 60*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", ns, "get", "events", "--field-selector", "involvedObject.name=second", "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		return strings.Contains(out, "FailedScheduling") && strings.Contains(out, "didn't match PersistentVolume's node affinity"), out
	})
	phase := strings.TrimSpace(must(t, "", "-n", ns, "get", "pod", "second", "-o", "jsonpath={.status.phase}"))
	if phase != "Pending" {
		t.Fatalf("the second pod is %s, want Pending", phase)
	}
}

// saveFailure writes what a failed test leaves behind, the namespace's
// pods and events and the last minutes of every Ferry container's log, to
// a file outside the cluster's directory (cluster-down removes that) and
// names it: the short dump above cannot hold the daemons' side.
func saveFailure(t *testing.T, ns, dump string) {
	dir := envOr("FERRY_E2E_FAILURES", "/var/tmp/ferry-e2e-failures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("the failure's logs not saved: %v", err)
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s in %s at %s\n\n%s\n", t.Name(), ns, time.Now().UTC().Format(time.RFC3339), dump)
	pods, _ := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}`)
	for _, p := range strings.Fields(pods) {
		logs, err := kubectl(t, "", "-n", "ferry-system", "logs", p, "--all-containers", "--prefix", "--since=10m", "--timestamps")
		fmt.Fprintf(&b, "\n==== %s %v\n%s", p, err, logs)
	}
	f := filepath.Join(dir, time.Now().UTC().Format("20060102T150405")+"-"+strings.ReplaceAll(t.Name(), "/", "_")+".log")
	if err := os.WriteFile(f, b.Bytes(), 0o644); err != nil {
		t.Logf("the failure's logs not saved: %v", err)
		return
	}
	t.Logf("the failure's pods, events and Ferry's logs: %s", f)
}

// A clone of a replicated claim whose pod the scheduler puts on a node
// holding no copy of the source is fetched from the copy holding the
// source's newest snapshot (its final one, the writer gone), over the
// peer stream: the clone reads what the writer wrote, and only the clone
// comes to that node.
func TestAReplicatedClaimClonesOnANodeWithoutACopy(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("src", "64Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	runPod(t, ns, "writer", "src", "")
	sum := writeRandom(t, ns, "writer", "blob", 2048)
	vol := volumeOf(t, ns, "src")
	waitReady(t, vol)
	deletePod(t, ns, "writer") // its unpublish takes the final snapshot
	// The far node: one with no copy and no replica pod of the volume, once
	// its copies have settled after the release (the ReplicaSet may add a
	// pod for a moment while the primary's joins it).
	far := ""
	eventually(t, "a node without a copy or a replica pod of the volume, the copies settled", 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil || len(rv.Status.Replicas) != 2 {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		busy := map[string]bool{}
		for _, r := range rv.Status.Replicas {
			busy[r.Node] = true
		}
		pods := must(t, "", "-n", "ferry-system", "get", "pods", "-l", "ferry.zfs.csi.io/volume", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}`)
		for _, l := range strings.Split(pods, "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.Contains(f[0], vol) {
				busy[f[1]] = true
			}
		}
		for _, n := range []string{"node1", "node2", "node3"} {
			if !busy[n] && !datasetExists(t, n, vol) {
				far = n
				return true, ""
			}
		}
		return false, fmt.Sprintf("copies and pods on %v", busy)
	})
	must(t, `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: clone}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ferry-rf2
  resources: {requests: {storage: 64Mi}}
  dataSource: {kind: PersistentVolumeClaim, name: src}
`, "-n", ns, "apply", "-f", "-")
	if got := runPod(t, ns, "far-reader", "clone", far); got != far {
		t.Fatalf("the clone's pod runs on %s, want %s", got, far)
	}
	if got := checksum(t, ns, "far-reader", "blob"); got != sum {
		t.Fatalf("the clone on %s reads %s, the writer wrote %s", far, got, sum)
	}
	if datasetExists(t, far, vol) {
		t.Fatalf("the source volume %s appeared on %s: the clone should bring only its own data", vol, far)
	}
	// Fetched from a copy, as the far node's daemon says.
	daemon := strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "--field-selector", "spec.nodeName="+far, "-o", "jsonpath={.items[0].metadata.name}"))
	if logs := must(t, "", "-n", "ferry-system", "logs", daemon, "-c", "ferry", "--since=10m"); !strings.Contains(logs, "volume cloned from a peer's copy") || !strings.Contains(logs, vol) {
		t.Fatalf("%s's daemon does not say it cloned %s from a peer's copy", far, vol)
	}
}
