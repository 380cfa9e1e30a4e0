//go:build cluster

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// rvStatus is what the tests read of a ReplicatedVolume.
type rvStatus struct {
	Spec struct {
		ReplicationFactor int `json:"replicationFactor"`
	} `json:"spec"`
	Status struct {
		Phase         string `json:"phase"`
		ReadyReplicas int    `json:"readyReplicas"`
		Primary       string `json:"primary"`
		Newest        string `json:"newest"`
		// NewestTime: when Newest was taken (RFC 3339).
		NewestTime *time.Time `json:"newestTime"`
		Epoch      int64      `json:"epoch"`
		Replicas   []struct {
			Node     string `json:"node"`
			Snapshot int64  `json:"snapshot"`
			Epoch    int64  `json:"snapshotEpoch"`
			Active   bool   `json:"active"`
			Ready    bool   `json:"ready"`
			Taker    bool   `json:"taker"`
			// Forked is set on a primary a takeover replaced.
			Forked *struct {
				Epoch int64 `json:"epoch"`
			} `json:"forked"`
		} `json:"replicas"`
	} `json:"status"`
}

func getRV(t *testing.T, vol string) (rvStatus, error) {
	var rv rvStatus
	out, err := kubectl(t, "", "get", "rv", vol, "-o", "json")
	if err != nil {
		return rv, err
	}
	return rv, json.Unmarshal([]byte(out), &rv)
}

// hostChecksum reads a file of node's copy of the volume where zfs-fuse
// mounts it on the host. The kernel's page cache is dropped first: a
// FUSE file's pages read before a receive are not invalidated by it
// (zfs-fuse; the reason a new primary's copy is remounted), so a read
// that once caught the file half-received would see those pages for good.
func hostChecksum(t *testing.T, node, vol, file string) string {
	out, err := exec.Command("sh", "-c", fmt.Sprintf("echo 1 > /proc/sys/vm/drop_caches; sha256sum $(zfs get -H -o value mountpoint ferry-%s/ferry/%s)/%s", node, vol, file)).CombinedOutput()
	if err != nil {
		// Say whether the copy is mounted at all, and what its directory
		// holds: a copy received into but not mounted reads empty.
		ds := fmt.Sprintf("ferry-%s/ferry/%s", node, vol)
		state, _ := exec.Command("sh", "-c", fmt.Sprintf("zfs get -H -o property,value,source mounted,mountpoint %s; grep -c ' %s ' /proc/self/mounts; ls -la $(zfs get -H -o value mountpoint %s) | head -5", ds, ds, ds)).CombinedOutput()
		return "unreadable: " + strings.TrimSpace(string(out)) + " [" + strings.Join(strings.Fields(string(state)), " ") + "]"
	}
	return strings.Fields(string(out))[0]
}

// primarySnapshot waits until the primary on node reported a snapshot and
// returns the newest it reported: any snapshot numbered above it was
// taken after this call (after the writes before it).
func primarySnapshot(t *testing.T, vol, node string) int64 {
	t.Helper()
	var at int64
	eventually(t, "the primary reports a snapshot", 90*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node == node && r.Snapshot > 0 {
				at = r.Snapshot
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})
	return at
}

func TestAReplicatedClaimGetsItsCopiesScalesBothWaysAndLeavesNothingWhenDeleted(t *testing.T) {
	ns := namespace(t)
	must(t, strings.Replace(pvcYAML("data", "64Mi", ""), "storageClassName: ferry", "storageClassName: ferry-rf2", 1), "-n", ns, "apply", "-f", "-")
	node := runPod(t, ns, "writer", "data", "")
	vol := volumeOf(t, ns, "data")
	name := "ferry-" + vol

	// The resource, the ReplicaSet of the one secondary and its budget.
	rv, err := getRV(t, vol)
	if err != nil {
		t.Fatalf("no ReplicatedVolume for %s: %v", vol, err)
	}
	if rv.Spec.ReplicationFactor != 2 || rv.Status.Primary != node {
		t.Fatalf("ReplicatedVolume %s: factor %d, primary %q; want 2 and %s", vol, rv.Spec.ReplicationFactor, rv.Status.Primary, node)
	}
	if got := must(t, "", "-n", "ferry-system", "get", "replicaset", name, "-o", "jsonpath={.spec.replicas}"); got != "1" {
		t.Fatalf("ReplicaSet %s has %s replicas, want 1 (the active primary is outside it)", name, got)
	}
	if got := must(t, "", "-n", "ferry-system", "get", "pdb", name, "-o", "jsonpath={.spec.minAvailable}"); got != "0" {
		t.Fatalf("PodDisruptionBudget %s: minAvailable %s, want 0", name, got)
	}

	sum := writeRandom(t, ns, "writer", "blob", 2048)
	after := primarySnapshot(t, vol, node)
	var second string
	start := time.Now()
	eventually(t, "a second node holds a snapshot taken after the write, ready", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node != node && r.Snapshot > after && r.Ready {
				second = r.Node
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})
	t.Logf("second copy on %s after %s (primary on %s)", second, time.Since(start).Round(time.Second), node)
	eventually(t, "the second copy's data equals what the pod wrote", 60*time.Second, func() (bool, string) {
		got := hostChecksum(t, second, vol, "blob")
		return got == sum, got
	})
	// While the primary is active only its node carries the placement label.
	label := "replica.ferry.zfs.csi.io/" + vol
	eventually(t, "the primary's node is labelled usable", 60*time.Second, func() (bool, string) {
		out := must(t, "", "get", "nodes", "-l", label+"=ready", "-o", "jsonpath={.items[*].metadata.name}")
		return strings.TrimSpace(out) == node, out
	})
	out := must(t, "", "get", "rv", vol)
	t.Logf("kubectl get rv:\n%s", out)
	for _, col := range []string{"CLAIM", "RF", "READY", "PRIMARY", "SNAPSHOT AGE", "MAX LAG", "TRANSFERS", "PHASE", "AGE"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get rv has no column %s", col)
		}
	}
	// The newest snapshot's age is when it was taken: after the write.
	eventually(t, "the status says when the newest snapshot was taken", 60*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil || rv.Status.NewestTime == nil {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		age := time.Since(*rv.Status.NewestTime)
		return age >= -2*time.Second && age < time.Since(start)+time.Minute, fmt.Sprintf("newest %s taken %s ago", rv.Status.Newest, age)
	})
	// The claim it was made for, by name (and its namespace with -o wide).
	if wide := must(t, "", "get", "rv", vol, "-o", "wide", "--no-headers"); !strings.Contains(wide, " data ") || !strings.Contains(wide, " "+ns+" ") {
		t.Errorf("kubectl get rv -o wide does not name the claim %s/data: %s", ns, wide)
	}

	// Deleting it by hand would destroy every copy: the admission policy
	// refuses it, even to the cluster's administrator, and says what to do.
	if out, err := kubectl(t, "", "delete", "rv", vol, "--dry-run=server"); err == nil || !strings.Contains(err.Error(), "delete its PersistentVolumeClaim") {
		t.Fatalf("kubectl delete rv by an administrator: %s %v; want a refusal naming the claim", out, err)
	}

	// Scaling by editing the resource: a third copy catches up; back to
	// two, one secondary leaves and destroys its copy (the safe-deletion
	// rule allows it: two others hold the newest snapshot).
	must(t, "", "patch", "rv", vol, "--type", "merge", "-p", `{"spec":{"replicationFactor":3}}`)
	var third string
	eventually(t, "a third node holds a ready copy", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		for _, r := range rv.Status.Replicas {
			if r.Node != node && r.Node != second && r.Ready && r.Snapshot > after {
				third = r.Node
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v %v", rv.Status, err)
	})
	if got := hostChecksum(t, third, vol, "blob"); got != sum {
		t.Fatalf("the third copy on %s reads %s, the pod wrote %s", third, got, sum)
	}
	must(t, "", "patch", "rv", vol, "--type", "merge", "-p", `{"spec":{"replicationFactor":2}}`)
	eventually(t, "one secondary left and destroyed its copy", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil || len(rv.Status.Replicas) != 2 {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		left := second
		for _, r := range rv.Status.Replicas {
			if r.Node == second {
				left = third
			}
		}
		return !datasetExists(t, left, vol), fmt.Sprintf("%+v; %s still holds a copy", rv.Status, left)
	})
	rv, err = getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	second = ""
	for _, r := range rv.Status.Replicas {
		if r.Node != node {
			second = r.Node
		}
	}
	if rv.Status.Primary != node || second == "" {
		t.Fatalf("after scaling down: %+v", rv.Status)
	}

	deletePod(t, ns, "writer")
	must(t, "", "-n", ns, "delete", "pvc", "data", "--wait=true", "--timeout=60s")
	eventually(t, "the volume, its objects and both copies are gone", 180*time.Second, func() (bool, string) {
		_, pvErr := kubectl(t, "", "get", "pv", vol)
		_, rvErr := kubectl(t, "", "get", "rv", vol)
		_, rsErr := kubectl(t, "", "-n", "ferry-system", "get", "replicaset", name)
		sum := sha256.Sum256([]byte(vol))
		pods := must(t, "", "-n", "ferry-system", "get", "pods", "-l", "ferry.zfs.csi.io/volume="+hex.EncodeToString(sum[:20]), "-o", "jsonpath={.items[*].metadata.name}")
		d1, d2 := datasetExists(t, node, vol), datasetExists(t, second, vol)
		labelled := strings.TrimSpace(must(t, "", "get", "nodes", "-l", label, "-o", "name"))
		ok := pvErr != nil && rvErr != nil && rsErr != nil && strings.TrimSpace(pods) == "" && !d1 && !d2 && labelled == ""
		return ok, fmt.Sprintf("pv %v, rv %v, rs %v, replica pods %q, datasets %v %v, labelled %q", pvErr == nil, rvErr == nil, rsErr == nil, pods, d1, d2, labelled)
	})
}
