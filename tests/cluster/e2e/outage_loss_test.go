//go:build cluster

package e2e

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newestHeld is the highest replication snapshot number node's pool holds
// of vol (ferry-<epoch>-<n>), read on the host: what that copy received,
// whether or not the shared state could record it.
func newestHeld(t *testing.T, node, vol string) int {
	t.Helper()
	out, err := exec.Command("zfs", "list", "-H", "-o", "name", "-t", "snapshot", "-r", "ferry-"+node+"/ferry/"+vol).CombinedOutput()
	if err != nil {
		t.Fatalf("snapshots of %s on %s: %v: %s", vol, node, err, out)
	}
	best := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		_, snap, ok := strings.Cut(l, "@ferry-")
		if !ok {
			continue
		}
		if _, n, ok := strings.Cut(snap, "-"); ok {
			if v, err := strconv.Atoi(n); err == nil && v > best {
				best = v
			}
		}
	}
	return best
}

// otherCopy is the node of a copy of vol other than first's.
func otherCopy(t *testing.T, vol, first string) string {
	t.Helper()
	rv, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rv.Status.Replicas {
		if r.Node != first {
			return r.Node
		}
	}
	t.Fatalf("no other copy of %s: %+v", vol, rv.Status)
	return ""
}

// Issue 21.8: the loss bound holds through an API server outage. The API
// server stops; the primary keeps snapshotting and the other copy keeps
// fetching over the peer service (it receives three more snapshots while
// the server is away); then the primary's node is killed, and the server
// comes back. The survivor takes over with what it fetched during the
// outage: the writes lost are at most about one snapshot interval and the
// transfer in flight, not the whole outage.
func TestNodeLossDuringAnAPIServerOutageLosesAtMostOneInterval(t *testing.T) {
	ns := namespace(t)
	must(t, writerSetYAML("w"), "-n", ns, "apply", "-f", "-")
	_, first := podOf(t, ns, "w", 120*time.Second)
	vol := volumeOf(t, ns, "data-w-0")
	waitReady(t, vol)
	replicated(t, vol, first)
	other := otherCopy(t, vol, first)
	restored, stopped := false, true
	apiserverSignal(t, "STOP")
	t.Cleanup(func() {
		if stopped {
			apiserverSignal(t, "CONT")
		}
		if !restored {
			nodeFault(t, "restore", first)
		}
	})
	from := newestHeld(t, other, vol)
	start := time.Now()
	// Waits on progress: three more snapshots received by the other copy
	// (about 6 s at the 2 s interval), however slow the machine.
	for newestHeld(t, other, vol) < from+3 {
		if time.Since(start) > 60*time.Second {
			t.Fatalf("during the outage %s received nothing past snapshot %d in 60 s: shipping stopped with the API server", other, newestHeld(t, other, vol))
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Printf("apiserver outage: %s received snapshots %d..%d in %.1f s while the API server was away\n", other, from, newestHeld(t, other, vol), time.Since(start).Seconds())
	atFault := hostLast(t, first, vol)
	nodeFault(t, "kill", first)
	apiserverSignal(t, "CONT")
	stopped = false
	pod, second, _ := readyPodElsewhere(t, ns, "w", first, 120*time.Second, func() {})
	if second != other {
		t.Fatalf("the pod runs on %s, want %s (the copy that fetched during the outage)", second, other)
	}
	resumedAt, err := kubectl(t, "", "-n", ns, "exec", pod, "--", "tail", "-n", "1", "/data/resumed")
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := strconv.Atoi(strings.TrimSpace(resumedAt))
	if err != nil {
		t.Fatalf("resumed at %q: %v", resumedAt, err)
	}
	lastOld := hostLast(t, first, vol) // a killed node writes nothing more
	lost := max(min(atFault, lastOld)-resumed, 0)
	fmt.Printf("lost writes (node killed during an API server outage): %d (%.1f s at 20/s with a 2 s snapshot interval)\n", lost, float64(lost)/20)
	if lost > 3*20 {
		t.Errorf("%d writes made before the node was killed are lost, more than one snapshot interval and its transfer: the outage's snapshots did not count", lost)
	}
	nodeFault(t, "restore", first)
	restored = true
	returnedCopySettles(t, vol, first, second)
}
