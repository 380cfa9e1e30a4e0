//go:build cluster

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The node-loss cases beyond a plain kill or cut (make e2e runs them on
// three nodes): a node whose every process pauses and resumes, a node
// declared shut down by the out-of-service taint.

// leaseTimes are the daemons' lease flags as the DaemonSet passes them
// (cmd/ferry/options.go's defaults where it passes none, as the test
// cluster's overlay does): the tests' time bounds are computed from them.
type leaseTimes struct {
	Renew, Duration, Margin time.Duration
}

func leaseFlags(t *testing.T) leaseTimes {
	t.Helper()
	lt := leaseTimes{Renew: time.Second, Duration: 5 * time.Second, Margin: 500 * time.Millisecond}
	out := must(t, "", "-n", "ferry-system", "get", "daemonset", "ferry-node", "-o", `jsonpath={.spec.template.spec.containers[?(@.name=="ferry")].args}`)
	var args []string
	if err := json.Unmarshal([]byte(out), &args); err != nil {
		t.Fatalf("the ferry daemon's args %q: %v", out, err)
	}
	for i, a := range args {
		for flag, d := range map[string]*time.Duration{"--lease-renew": &lt.Renew, "--lease-duration": &lt.Duration, "--lease-margin": &lt.Margin} {
			v, ok := strings.CutPrefix(a, flag+"=")
			if !ok && a == flag && i+1 < len(args) {
				v, ok = args[i+1], true
			}
			if !ok {
				continue
			}
			p, err := time.ParseDuration(v)
			if err != nil {
				t.Fatalf("the ferry daemon's %s=%q: %v", flag, v, err)
			}
			*d = p
		}
	}
	t.Logf("lease: renew %s, duration %s, margin %s", lt.Renew, lt.Duration, lt.Margin)
	return lt
}

// rvWatch samples a ReplicatedVolume every 200 ms in the background: the
// most active primaries listed at once, and when a primary other than the
// one at the start was first seen.
type rvWatch struct {
	mu        sync.Mutex
	maxActive int
	took      time.Time
	primaries []string
	stop      chan struct{}
	done      chan struct{}
}

func watchRV(t *testing.T, vol, primary string) *rvWatch {
	w := &rvWatch{primaries: []string{primary}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if rv, err := getRV(t, vol); err == nil {
				w.mu.Lock()
				w.maxActive = max(w.maxActive, activeCount(rv))
				if p := rv.Status.Primary; p != "" && p != primary && w.took.IsZero() {
					w.took = time.Now()
				}
				if p := rv.Status.Primary; p != "" && !slices.Contains(w.primaries, p) {
					w.primaries = append(w.primaries, p)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.Stop)
	return w
}

// Stop ends the sampling (it may be called again).
func (w *rvWatch) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// MaxActive is the most active primaries seen listed at once.
func (w *rvWatch) MaxActive() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxActive
}

// TookOver is when another primary was first seen (zero: never).
func (w *rvWatch) TookOver() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.took
}

// Primaries are the primaries seen, the first one first.
func (w *rvWatch) Primaries() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.primaries)
}

// podLast is the first field of the last line of file in the pod.
func podLast(t *testing.T, ns, pod, file string) int {
	out, err := kubectl(t, "", "-n", ns, "exec", pod, "--", "tail", "-n", "1", file)
	if err != nil {
		return -1
	}
	f := strings.Fields(out)
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return n
}

// logIntact checks the writer's log as the running pod reads it: line i
// holds number i, nothing missing, nothing twice (a writer resumes after
// the last number its copy holds, so every history the volume may take
// has that shape).
func logIntact(t *testing.T, ns, pod string) {
	t.Helper()
	out, err := kubectl(t, "", "-n", ns, "exec", pod, "--", "awk", `$1 != NR { print "line " NR " holds " $0; bad = 1; exit } END { if (!bad) print "ok " NR }`, "/data/log")
	if err != nil || !strings.HasPrefix(out, "ok ") {
		t.Fatalf("the log in %s is not the numbers 1..n in order: %s %v", pod, out, err)
	}
}

// podUID is the pod's UID.
func podUID(t *testing.T, ns, pod string) string {
	return strings.TrimSpace(must(t, "", "-n", ns, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}"))
}

// tokenWriterSetYAML is writerSetYAML with the writer's own random token
// on each line ("<n> <token>"): on the host, the lines a pod wrote are
// told apart from lines a copy received from another pod.
func tokenWriterSetYAML(name string) string {
	return statefulSetRunning(name, ` |
          tok=$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')
          n=$(tail -n 1 /data/log 2>/dev/null | cut -d ' ' -f 1); n=${n:-0}
          echo "$n" >> /data/resumed
          exec 3>>/data/log
          while :; do n=$((n+1)); echo "$n $tok" >&3; sleep 0.05; done`)
}

// tokenLog reads a token writer's log where the host sees node's copy:
// the highest number each token wrote, and the last line's token.
func tokenLog(path string) (map[string]int, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	most := map[string]int{}
	last := ""
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue // a line being written
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		most[f[1]] = max(most[f[1]], n)
		last = f[1]
	}
	return most, last, nil
}

// hostLogPath is the log of node's copy where zfs-fuse mounts it on the
// host.
func hostLogPath(t *testing.T, node, vol string) string {
	out, err := exec.Command("zfs", "get", "-H", "-o", "value", "mountpoint", "ferry-"+node+"/ferry/"+vol).CombinedOutput()
	if err != nil {
		t.Fatalf("the mountpoint of %s's copy: %v %s", node, err, out)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "log")
}

// A node whose every process stops (a stalled VM, a host thrashing) past
// its lease: the survivor takes over and the pod runs on its copy. When
// the node resumes, its old writer may write once more before its guard
// (or its volume manager's watchdog) fences it: ARCHITECTURE 5.8 bounds
// that to about a guard check, and this test measures it on the host, by
// the old writer's own token, polling every 50 ms until the old copy stays
// unchanged for a second.
func TestNodeLossPausedPrimaryNodeFailsOver(t *testing.T) {
	ns := namespace(t)
	must(t, tokenWriterSetYAML("w"), "-n", ns, "apply", "-f", "-")
	_, first := podOf(t, ns, "w", 120*time.Second)
	vol := volumeOf(t, ns, "data-w-0")
	waitReady(t, vol)
	replicated(t, vol, first)
	before, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			nodeFault(t, "restore", first)
		}
	})

	w := watchRV(t, vol, first)
	start := time.Now()
	nodeFault(t, "pause", first)
	pod, second, ready := readyPodElsewhere(t, ns, "w", first, 60*time.Second, func() {})
	took := w.TookOver()
	if took.IsZero() {
		took = ready // the takeover came before the pod was ready
	}
	t.Logf("paused %s: the pod ready on %s after %.1f s", first, second, ready.Sub(start).Seconds())
	resumed := podLast(t, ns, pod, "/data/resumed")
	if resumed <= 0 {
		t.Fatalf("the new pod resumed at %d: its copy holds none of the log", resumed)
	}
	eventually(t, "the new pod appends twenty numbers", 30*time.Second, func() (bool, string) {
		n := podLast(t, ns, pod, "/data/log")
		return n >= resumed+20, fmt.Sprintf("at %d, resumed at %d", n, resumed)
	})
	rv, err := getRV(t, vol)
	if err != nil || rv.Status.Primary != second || rv.Status.Epoch <= before.Status.Epoch {
		t.Fatalf("after the takeover: primary %q (want %s), epoch %d (was %d): %v", rv.Status.Primary, second, rv.Status.Epoch, before.Status.Epoch, err)
	}

	// The old writer's lines on the paused node's copy: its token is the
	// last line's (nothing else wrote there since the pod started).
	path := hostLogPath(t, first, vol)
	most, old, err := tokenLog(path)
	if err != nil || old == "" {
		t.Fatalf("the paused node's log %s: %v (last token %q)", path, err, old)
	}
	base := most[old]
	resumeAt := time.Now()
	nodeFault(t, "resume", first)
	oldMax, grewAt := base, resumeAt
	for {
		// A copy being rolled back or replaced may be unreadable for a
		// moment, and afterwards holds the new pod's lines: only the old
		// token's highest number counts.
		if most, _, err := tokenLog(path); err == nil && most[old] > oldMax {
			oldMax, grewAt = most[old], time.Now()
		}
		if time.Since(grewAt) >= time.Second {
			break
		}
		if time.Since(resumeAt) > 30*time.Second {
			t.Fatalf("the paused node's copy still grows 30 s after it resumed: %d to %d", base, oldMax)
		}
		time.Sleep(50 * time.Millisecond)
	}
	grew := grewAt.Sub(resumeAt)
	fmt.Printf("paused node: %d writes in %.2f s after resuming\n", oldMax-base, grew.Seconds())
	if grew > 2*time.Second {
		t.Errorf("the paused node's old writer went on for %s after the node resumed (%d writes): its fence came late", grew.Round(10*time.Millisecond), oldMax-base)
	}
	// While the new pod, writing at the same pace, appends ten more
	// numbers, the old writer writes nothing.
	from := podLast(t, ns, pod, "/data/log")
	eventually(t, "the new pod appends ten more numbers", 30*time.Second, func() (bool, string) {
		if most, _, err := tokenLog(path); err == nil && most[old] > oldMax {
			t.Fatalf("the paused node's old writer wrote %d, after it had stopped at %d: a writer still runs on %s", most[old], oldMax, first)
		}
		n := podLast(t, ns, pod, "/data/log")
		return n >= from+10, fmt.Sprintf("at %d, from %d", n, from)
	})

	w.Stop()
	if n := w.MaxActive(); n > 1 {
		t.Fatalf("%d active primaries seen at once", n)
	}
	nodeFencedBefore(t, vol, first, start, took)
	// The node is back (resumed, not restarted): the survivor's takeover
	// deleted the old pod, its copy rejoins as a secondary of the new
	// epoch, the taint goes.
	nodeFault(t, "restore", first)
	restored = true
	returnedNodeRejoins(t, vol, first, second)
	logIntact(t, ns, pod)
	if oldMax > resumed {
		fencedWritesKept(t, first, vol)
	}
}

// An administrator declares the primary's node shut down (Kubernetes'
// non-graceful node shutdown: the out-of-service taint): the volume is
// taken over at once, without waiting for the lease.
func TestNodeLossOutOfServiceTakesOverAtOnce(t *testing.T) {
	const oos = "node.kubernetes.io/out-of-service"
	ns := namespace(t)
	must(t, writerSetYAML("w"), "-n", ns, "apply", "-f", "-")
	_, first := podOf(t, ns, "w", 120*time.Second)
	vol := volumeOf(t, ns, "data-w-0")
	waitReady(t, vol)
	replicated(t, vol, first)
	lt := leaseFlags(t)
	restored := false
	t.Cleanup(func() {
		_, _ = kubectl(t, "", "taint", "node", first, oos+"-")
		if !restored {
			nodeFault(t, "restore", first)
		}
	})

	// Kill the node right after a renewal of its lease, seen as the
	// Lease's resourceVersion changing between two reads: the renewal
	// landed after the earlier read began (prev), so every observer first
	// saw it after prev, and the lease lets none take the node for lost
	// before prev + duration + margin. A takeover seen before that came
	// from the taint.
	lease := "ferry-node-" + first
	leaseVersion := func() string {
		return strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "lease", lease, "-o", "jsonpath={.metadata.resourceVersion}"))
	}
	prev := time.Now()
	v0 := leaseVersion()
	for deadline := time.Now().Add(10 * lt.Renew); ; {
		at := time.Now()
		if leaseVersion() != v0 {
			break
		}
		prev = at
		if at.After(deadline) {
			t.Fatalf("the lease %s of %s was not renewed in %s", lease, first, 10*lt.Renew)
		}
	}
	leaseBound := prev.Add(lt.Duration + lt.Margin)
	w := watchRV(t, vol, first)
	start := time.Now()
	nodeFault(t, "kill", first)
	must(t, "", "taint", "node", first, oos+"=nodeshutdown:NoExecute")
	tainted := time.Now()
	var second string
	var took time.Time
	for deadline := time.Now().Add(60 * time.Second); ; {
		if rv, err := getRV(t, vol); err == nil && rv.Status.Primary != "" && rv.Status.Primary != first {
			second, took = rv.Status.Primary, time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no takeover from %s 60 s after its out-of-service taint", first)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("out-of-service takeover: %.1f s after the taint (%s to %s); the lease allows none before %.1f s after it\n",
		took.Sub(tainted).Seconds(), first, second, leaseBound.Sub(tainted).Seconds())
	// Our reads only make the takeover look later than it was; a margin
	// short of the lease's earliest takeover, so no lease path passes.
	if limit := leaseBound.Add(-lt.Margin); !took.Before(limit) {
		t.Fatalf("the takeover was seen %.1f s after the taint, not before %.1f s: the lease's pace, not the taint's", took.Sub(tainted).Seconds(), limit.Sub(tainted).Seconds())
	}

	pod, node, _ := readyPodElsewhere(t, ns, "w", first, 60*time.Second, func() {})
	if node != second {
		t.Fatalf("the pod runs on %s, the primary is %s", node, second)
	}
	if resumed := podLast(t, ns, pod, "/data/resumed"); resumed <= 0 {
		t.Fatalf("the new pod resumed at %d: its copy holds none of the log", resumed)
	}
	logIntact(t, ns, pod)
	w.Stop()
	if n := w.MaxActive(); n > 1 {
		t.Fatalf("%d active primaries seen at once", n)
	}
	nodeFencedBefore(t, vol, first, start, took)

	// The node is back: the administrator lifts the taint, the node
	// starts again and its copy rejoins.
	must(t, "", "taint", "node", first, oos+"-")
	nodeFault(t, "restore", first)
	restored = true
	returnedNodeRejoins(t, vol, first, second)
}
