//go:build cluster

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// statefulSetYAML is one pod of a StatefulSet with a replicated claim
// (ferry-rf2) mounted at /data.
func statefulSetYAML(name string) string {
	return statefulSetRunning(name, ` "sleep 100000"`)
}

// statefulSetRunning is that StatefulSet with its container running
// `sh -c` with script (YAML: a flow scalar after a space, or a block
// scalar on lines of its own).
func statefulSetRunning(name, script string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: %[1]s}
spec:
  replicas: 1
  selector: {matchLabels: {app: %[1]s}}
  serviceName: %[1]s
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: ferry-test:dev
        imagePullPolicy: Never
        command:
        - sh
        - -c
        -%[2]s
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: ferry-rf2
      resources: {requests: {storage: 64Mi}}
`, name, script)
}

// deploymentYAML is a Deployment of one pod with strategy Recreate (the
// README's advice for replicated claims) using claim.
func deploymentYAML(name, claim string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: ferry-test:dev
        imagePullPolicy: Never
        command: [sh, -c, "sleep 100000"]
        volumeMounts: [{name: v, mountPath: /data}]
      volumes: [{name: v, persistentVolumeClaim: {claimName: %[2]s}}]
`, name, claim)
}

// podOf waits for the one Running, Ready pod with label app=name and
// returns its name and node.
func podOf(t *testing.T, ns, app string, timeout time.Duration) (string, string) {
	t.Helper()
	var pod, node string
	eventually(t, "a ready pod of "+app, timeout, func() (bool, string) {
		out, err := kubectl(t, "", "-n", ns, "get", "pods", "-l", "app="+app, "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return false, err.Error()
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 4 && f[2] == "Running" && f[3] == "True" {
				pod, node = f[0], f[1]
				return true, ""
			}
		}
		return false, out
	})
	return pod, node
}

func rsReplicas(t *testing.T, vol string) string {
	out, _ := kubectl(t, "", "-n", "ferry-system", "get", "replicaset", "ferry-"+vol, "-o", "jsonpath={.spec.replicas}")
	return strings.TrimSpace(out)
}

// activeCount is how many replicas the ReplicatedVolume lists active.
func activeCount(rv rvStatus) int {
	n := 0
	for _, r := range rv.Status.Replicas {
		if r.Active {
			n++
		}
	}
	return n
}

// waitReady waits until the volume has two ready copies.
func waitReady(t *testing.T, vol string) {
	t.Helper()
	// Two ready copies each holding a snapshot: a new volume's copies are
	// ready while both are empty, and the secondary is not for a moment
	// once the primary's first snapshot is taken, until it received it.
	eventually(t, "two ready copies holding a snapshot", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		held := 0
		for _, r := range rv.Status.Replicas {
			if r.Ready && r.Snapshot > 0 {
				held++
			}
		}
		return err == nil && rv.Status.ReadyReplicas >= 2 && held >= 2, fmt.Sprintf("%+v %v", rv.Status, err)
	})
}

// cordon keeps new pods off node until the test ends.
func cordon(t *testing.T, node string) {
	must(t, "", "cordon", node)
	t.Cleanup(func() { _, _ = kubectl(t, "", "uncordon", node) })
}

// A StatefulSet's pod is deleted and re-created on another node (the first
// is cordoned): its data is there byte for byte, the last write before the
// unmount included; the new node's replica is the primary of a new epoch;
// the ReplicaSet runs replicationFactor - 1 secondaries while the pod runs
// and replicationFactor once it is gone.
func TestAStatefulSetPodMovesWithItsDataToAnotherNode(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("db"), "-n", ns, "apply", "-f", "-")
	pod, first := podOf(t, ns, "db", 120*time.Second)
	vol := volumeOf(t, ns, "data-db-0")
	blob := writeRandom(t, ns, pod, "blob", 2048)
	waitReady(t, vol)
	// Written after the last periodic snapshot could have shipped it: only
	// the final snapshot at unpublish carries it.
	last := writeRandom(t, ns, pod, "last", 64)
	if got := rsReplicas(t, vol); got != "1" {
		t.Fatalf("the ReplicaSet runs %s secondaries while the pod runs, want 1", got)
	}

	cordon(t, first)
	start := time.Now()
	must(t, "", "-n", ns, "delete", "pod", pod, "--wait=false")
	pod, second := podOf(t, ns, "db", 180*time.Second)
	t.Logf("moved from %s to %s in %s", first, second, time.Since(start).Round(100*time.Millisecond))
	if second == first {
		t.Fatalf("the pod came back on the cordoned node %s", first)
	}
	if got := checksum(t, ns, pod, "blob"); got != blob {
		t.Fatalf("after the move blob reads %s, the pod wrote %s", got, blob)
	}
	if got := checksum(t, ns, pod, "last"); got != last {
		t.Fatalf("after the move the last write reads %s, the pod wrote %s", got, last)
	}
	rv, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Status.Primary != second || activeCount(rv) != 1 {
		t.Fatalf("after the move: primary %q with %d active, want %s alone: %+v", rv.Status.Primary, activeCount(rv), second, rv.Status)
	}
	eventually(t, "the ReplicaSet runs one secondary while the pod runs", 60*time.Second, func() (bool, string) {
		got := rsReplicas(t, vol)
		return got == "1", got
	})
	// Still writable on the new node.
	writeRandom(t, ns, pod, "after", 16)

	must(t, "", "-n", ns, "scale", "statefulset", "db", "--replicas=0")
	eventually(t, "with no pod, no replica is active and the ReplicaSet runs both copies", 120*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		got := rsReplicas(t, vol)
		return err == nil && activeCount(rv) == 0 && got == "2", fmt.Sprintf("replicas %s, %+v", got, rv.Status)
	})
}

// A Deployment with strategy Recreate moves the same way.
func TestADeploymentWithRecreateMovesWithItsData(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("data", "64Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	must(t, deploymentYAML("web", "data"), "-n", ns, "apply", "-f", "-")
	pod, first := podOf(t, ns, "web", 120*time.Second)
	vol := volumeOf(t, ns, "data")
	blob := writeRandom(t, ns, pod, "blob", 1024)
	waitReady(t, vol)
	last := writeRandom(t, ns, pod, "last", 16)
	cordon(t, first)
	must(t, "", "-n", ns, "delete", "pod", pod, "--wait=false")
	pod, second := podOf(t, ns, "web", 180*time.Second)
	if second == first {
		t.Fatalf("the pod came back on the cordoned node %s", first)
	}
	if checksum(t, ns, pod, "blob") != blob || checksum(t, ns, pod, "last") != last {
		t.Fatal("the data did not move with the pod")
	}
}

// Two pods on two nodes want the same read/write volume: the second waits
// (the kubelet's node-affinity check refuses it while the volume is usable
// only on the primary's node; a publish that got past a lagging label would
// answer Aborted), never are both replicas active; once the first pod is gone the second gets the volume
// with the first's last write.
func TestTwoPodsWantingTheSameVolumeNeverBothWrite(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("data", "64Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	first := runPod(t, ns, "first", "data", "")
	vol := volumeOf(t, ns, "data")
	waitReady(t, vol)
	var other string
	rv, _ := getRV(t, vol)
	for _, r := range rv.Status.Replicas {
		if r.Node != first {
			other = r.Node
		}
	}
	// Pinned by nodeName to the secondary's node: the scheduler (which
	// would keep it off, the volume being usable only on the primary's
	// node) is not asked; the kubelet publishes there.
	second := strings.Replace(podYAML("second", "data", ""), "spec:\n", "spec:\n  nodeName: "+other+"\n", 1)
	must(t, second, "-n", ns, "apply", "-f", "-")
	last := writeRandom(t, ns, "first", "last", 16)
	// The kubelet refuses to mount it (the volume is usable only on the
	// active primary's node, its placement label says so) or, had the
	// label lagged, Ferry's publish waits and answers Aborted.
	eventually(t, "the second pod's mount waits, saying why", 90*time.Second, func() (bool, string) {
		out, _ := kubectl(t, "", "-n", ns, "get", "events", "--field-selector", "involvedObject.name=second", "-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
		return strings.Contains(out, "FailedMount") && (strings.Contains(out, "NodeAffinity") || strings.Contains(out, "Aborted")), out
	})
	// The first pod kept the volume all along, alone.
	rv, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	if n := activeCount(rv); n != 1 || rv.Status.Primary != first {
		t.Fatalf("while the first pod runs: %d active, primary %q: %+v", n, rv.Status.Primary, rv.Status)
	}
	if phase := strings.TrimSpace(must(t, "", "-n", ns, "get", "pod", "second", "-o", "jsonpath={.status.phase}")); phase == "Running" {
		t.Fatal("the second pod runs while the first holds the volume")
	}
	deletePod(t, ns, "first")
	must(t, "", "-n", ns, "wait", "--for=condition=Ready", "pod/second", "--timeout=180s")
	if got := checksum(t, ns, "second", "last"); got != last {
		t.Fatalf("the second pod reads %s, the first wrote %s", got, last)
	}
	rv, _ = getRV(t, vol)
	if rv.Status.Primary != other || activeCount(rv) != 1 {
		t.Fatalf("after the first pod left: %+v", rv.Status)
	}
}

// kubectl drain of the primary's node: the pod using the volume is
// evicted first (the primary's volume manager is held by its budget until
// the unpublish recorded the final snapshot and moved it back into the
// ReplicaSet), comes up on another replica's node with its data, and the
// drain completes.
func TestDrainingThePrimarysNodeMovesThePodWithItsData(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("db"), "-n", ns, "apply", "-f", "-")
	pod, first := podOf(t, ns, "db", 120*time.Second)
	vol := volumeOf(t, ns, "data-db-0")
	blob := writeRandom(t, ns, pod, "blob", 1024)
	waitReady(t, vol)
	last := writeRandom(t, ns, pod, "last", 16)
	t.Cleanup(func() { _, _ = kubectl(t, "", "uncordon", first) })
	start := time.Now()
	must(t, "", "drain", first, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
	t.Logf("drain of %s took %s", first, time.Since(start).Round(100*time.Millisecond))
	pod, second := podOf(t, ns, "db", 180*time.Second)
	if second == first {
		t.Fatalf("the pod is still on the drained node %s", first)
	}
	if checksum(t, ns, pod, "blob") != blob || checksum(t, ns, pod, "last") != last {
		t.Fatal("the data did not move with the pod")
	}
	rv, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Status.Primary != second || activeCount(rv) != 1 {
		t.Fatalf("after the drain: %+v", rv.Status)
	}
}

// dfKiB is the size in KiB of the filesystem at /data in pod.
func dfKiB(t *testing.T, ns, pod string) (int64, string) {
	out, _ := kubectl(t, "", "-n", ns, "exec", pod, "--", "df", "-kP", "/data")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return 0, out
	}
	var kb int64
	fmt.Sscan(strings.Fields(lines[len(lines)-1])[1], &kb)
	return kb, out
}

// A replicated claim grown online and then moved: the pod on the other
// copy's node sees the grown size, and no more (a received copy had no
// quota: the pod saw the whole pool), with its data.
func TestAReplicatedClaimGrownThenMovedKeepsItsSize(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("grow"), "-n", ns, "apply", "-f", "-")
	pod, first := podOf(t, ns, "grow", 120*time.Second)
	vol := volumeOf(t, ns, "data-grow-0")
	blob := writeRandom(t, ns, pod, "blob", 2048)
	waitReady(t, vol)
	must(t, "", "-n", ns, "patch", "pvc", "data-grow-0", "--type=merge", "-p", `{"spec":{"resources":{"requests":{"storage":"160Mi"}}}}`)
	eventually(t, "the pod sees the grown filesystem", 120*time.Second, func() (bool, string) {
		kb, out := dfKiB(t, ns, pod)
		return kb >= 150*1024, out
	})
	eventually(t, "the volume's size is recorded for every copy", 60*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "get", "replicatedvolume", vol, "-o", "jsonpath={.spec.capacityBytes}")
		return err == nil && strings.TrimSpace(out) == fmt.Sprint(160<<20), out
	})
	waitReady(t, vol)

	cordon(t, first)
	must(t, "", "-n", ns, "delete", "pod", pod, "--wait=false")
	pod, second := podOf(t, ns, "grow", 180*time.Second)
	if second == first {
		t.Fatalf("the pod came back on the cordoned node %s", first)
	}
	eventually(t, "the moved pod sees the grown size and no more", 60*time.Second, func() (bool, string) {
		kb, out := dfKiB(t, ns, pod)
		return kb >= 150*1024 && kb <= 170*1024, out
	})
	if got := checksum(t, ns, pod, "blob"); got != blob {
		t.Fatalf("after the move blob reads %s, the pod wrote %s", got, blob)
	}
}
