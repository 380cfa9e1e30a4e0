//go:build cluster

package e2e

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 21.11: the primary's node daemon stops (paused here: a crash loop,
// an out-of-memory kill, an upgrade waiting for its image) and the node
// then loses the API server: its guard is gone, and the kubelet never
// hears of the survivor's forced deletion of the pod. Only the volume
// manager's watchdog stops the writer: at the write permit's deadline, a
// margin and more before any survivor may take over, it locks the copy's
// writes (readonly=on) and stops the writer. The test follows the old
// writer's own token on the node's copy from the host: its last write
// comes before the takeover, and it writes nothing while the new pod
// appends. Back, the node's daemon finds its copy taken over: it rejoins,
// or leaves as surplus when a copy was made on the third node meanwhile.
func TestNodeLossWithItsDaemonDownThePrimarysWatchdogFencesItBeforeTheTakeover(t *testing.T) {
	ns := namespace(t)
	must(t, tokenWriterSetYAML("w"), "-n", ns, "apply", "-f", "-")
	_, first := podOf(t, ns, "w", 120*time.Second)
	vol := volumeOf(t, ns, "data-w-0")
	waitReady(t, vol)
	replicated(t, vol, first)
	restored := false
	t.Cleanup(func() {
		if !restored {
			nodeFault(t, "restore", first)
		}
	})
	path := hostLogPath(t, first, vol)
	var old string
	eventually(t, "the writer's token on the primary's copy", 30*time.Second, func() (bool, string) {
		_, last, err := tokenLog(path)
		old = last
		return err == nil && last != "", fmt.Sprint(err)
	})

	w := watchRV(t, vol, first)
	start := time.Now()
	nodeFault(t, "pause-daemon", first)
	nodeFault(t, "isolate", first)
	// The old writer's last write, by its own stamp (the host may show a
	// write late).
	var last mark
	follow := func() {
		if most, _, err := tokenLog(path); err == nil && most[old].N > last.N {
			last = most[old]
		}
	}
	// The lock, by its record on the dataset (zfs-fuse's `zfs get
	// readonly` shows the mount's temporary value), and by its effect: a
	// new file on the copy is refused (tried until it is: the record is
	// written just before the property).
	locked, refused := false, ""
	for w.TookOver().IsZero() {
		follow()
		if refused == "" {
			out, _ := exec.Command("zfs", "get", "-H", "-o", "value", "ferry.zfs.csi.io:writes-locked", "ferry-"+first+"/ferry/"+vol).Output()
			if v := strings.TrimSpace(string(out)); v != "" && v != "-" {
				locked = true
				// The probe's shell holds the copy a moment: the watchdog
				// may stop it first; then it is tried again.
				probe := filepath.Join(filepath.Dir(path), ".e2e-probe")
				out, err := exec.Command("sh", "-c", ": > "+probe).CombinedOutput()
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.Exited() {
					refused = strings.TrimSpace(string(out))
				}
			}
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("no takeover 90 s after %s's daemon stopped and it lost the API server", first)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := w.TookOver()
	pod, second, ready := readyPodElsewhere(t, ns, "w", first, 90*time.Second, follow)
	t.Logf("%s's daemon paused and the node isolated: taken over after %.1f s, the pod ready on %s after %.1f s; the old writer's last write %.1f s after the fault",
		first, took.Sub(start).Seconds(), second, ready.Sub(start).Seconds(), last.At.Sub(start).Seconds())
	if !locked {
		t.Errorf("the primary's copy on %s was never seen locked before the takeover (its watchdog's write lock)", first)
	} else if refused == "" {
		t.Errorf("the primary's copy on %s is locked, but a new file on it was not refused", first)
	} else {
		t.Logf("a new file on the locked copy: %s", refused)
	}
	if !last.At.Before(took) {
		t.Errorf("the old writer on %s last wrote %.2f s after the fault, the takeover was seen at %.2f s: two writers", first, last.At.Sub(start).Seconds(), took.Sub(start).Seconds())
	}
	resumed := podLast(t, ns, pod, "/data/resumed")
	from := podLast(t, ns, pod, "/data/log")
	eventually(t, "the new pod appends twenty numbers", 30*time.Second, func() (bool, string) {
		before := last
		follow()
		if last.N > before.N && !last.At.Before(took) {
			t.Fatalf("the old writer on %s wrote %d, %.2f s after the takeover was seen (it had stopped at %d)", first, last.N, last.At.Sub(took).Seconds(), before.N)
		}
		n := podLast(t, ns, pod, "/data/log")
		return n >= from+20, fmt.Sprintf("at %d, from %d", n, from)
	})
	w.Stop()
	if n := w.MaxActive(); n > 1 {
		t.Fatalf("%d active primaries seen at once", n)
	}
	if p := w.Primaries(); len(p) != 2 || p[1] != second {
		t.Fatalf("primaries seen %v, want %s then %s", p, first, second)
	}

	// The daemon back (resumed), the API server reachable again: the copy
	// was taken over, so it is fenced for good and rejoins as a secondary
	// (or leaves as surplus: the takeover deleted its replica pod too).
	nodeFault(t, "restore", first)
	restored = true
	returnedNodeRejoins(t, vol, first, second)
	logIntact(t, ns, pod)
	if last.N > resumed {
		fencedWritesKept(t, first, vol)
	}
}
