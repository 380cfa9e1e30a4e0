// Command move measures a planned move on the running local cluster (make
// cluster-up cluster-deploy): a StatefulSet's pod with a replicated claim
// writes a file, its node is cordoned and the pod deleted, and the
// re-created pod must run on another node and read the file back intact.
// Each move is timed from a watch of the pods in two parts: the stop
// (delete -> the old pod gone: its container stopped, the unpublish's
// final snapshot taken and the copy released, as the kubelet deletes the
// pod only once its volumes are torn down) and the move itself (old pod
// gone -> new pod ready: created by the StatefulSet controller,
// scheduled, running, which includes the publish: the final snapshot
// fetched, the copy promoted and mounted, then the container's start). It
// prints each move's breakdown and the medians of -moves. Not a pass/fail
// test: `make bench-move`.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	kubectlBin = flag.String("kubectl", filepath.Join(os.Getenv("HOME"), ".cache/ferry/k8s-v1.37.2/kubectl"), "kubectl")
	kubeconfig = flag.String("kubeconfig", envOr("KUBECONFIG", "/var/lib/ferry-e2e/kubeconfig"), "the cluster's kubeconfig")
	class      = flag.String("storage-class", "ferry-rf2", "a replicated StorageClass")
)

var (
	failed  bool
	failErr error
	// cleanup undoes what the bench did; fail runs it too.
	cleanup = func() {}
)

func main() {
	moves := flag.Int("moves", 5, "moves measured")
	keep := flag.Bool("keep-on-failure", false, "leave the namespace and the cordon when a move fails (to look at)")
	flag.Parse()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "bench-move-" + hex.EncodeToString(b)
	must("", "create", "namespace", ns)
	var cordoned string
	cleanup = func() {
		if failed && *keep {
			fmt.Fprintf(os.Stderr, "left as it failed: namespace %s, node %s cordoned\n", ns, cordoned)
			return
		}
		if cordoned != "" {
			_, _ = kubectl("", "uncordon", cordoned)
		}
		_, _ = kubectl("", "delete", "namespace", ns, "--wait=true", "--timeout=120s")
	}
	defer cleanup()
	must(statefulSet(*class), "-n", ns, "apply", "-f", "-")
	pod, node := waitPod(ns, "", 3*time.Minute)
	vol := strings.TrimSpace(must("", "-n", ns, "get", "pvc", "data-db-0", "-o", "jsonpath={.spec.volumeName}"))
	fmt.Printf("volume %s, pod on %s\n", vol, node)
	waitFor("two ready copies", 3*time.Minute, func() bool {
		out, _ := kubectl("", "get", "rv", vol, "-o", "jsonpath={.status.readyReplicas}")
		return strings.TrimSpace(out) == "2"
	})
	w := watchPods(ns)
	var moved, stops, wholes []time.Duration
	for i := 0; i < *moves; i++ {
		sum := write(ns, pod)
		if cordoned != "" {
			must("", "uncordon", cordoned)
		}
		must("", "cordon", node)
		cordoned = node
		old := types.UID(strings.TrimSpace(must("", "-n", ns, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")))
		start := time.Now()
		must("", "-n", ns, "delete", "pod", pod, "--wait=false")
		var to string
		pod, to = waitPod(ns, node, 3*time.Minute)
		if got := read(ns, pod); got != sum {
			diagnose(vol)
			failed = true
			failErr = (fmt.Errorf("move %d: the file reads %s on %s, %s was written on %s", i+1, got, to, sum, node))
		}
		if failed {
			break
		}
		st, err := w.steps(old, start)
		if err != nil {
			fail(fmt.Errorf("move %d: %w", i+1, err))
		}
		moved, stops, wholes = append(moved, st.ready.Sub(st.gone)), append(stops, st.gone.Sub(start)), append(wholes, st.ready.Sub(start))
		fmt.Printf("move %d: %s -> %s: stop %.1f s (delete -> old pod gone), move %.1f s (gone -> new pod ready: created +%.1f, scheduled +%.1f, running +%.1f, ready +%.1f)\n",
			i+1, node, to, st.gone.Sub(start).Seconds(), st.ready.Sub(st.gone).Seconds(),
			st.created.Sub(st.gone).Seconds(), st.scheduled.Sub(st.created).Seconds(), st.running.Sub(st.scheduled).Seconds(), st.ready.Sub(st.running).Seconds())
		node = to
	}
	if failed {
		cleanup()
		fmt.Fprintln(os.Stderr, "bench-move:", failErr)
		os.Exit(1)
	}
	fmt.Printf("move: %.1f s (median of %d, old pod gone -> new pod ready with its data; fastest %.1f s, slowest %.1f s); stop %.1f s; delete -> ready %.1f s\n",
		median(moved), len(moved), minOf(moved), maxOf(moved), median(stops), median(wholes))
}

func median(d []time.Duration) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Seconds()
}

func minOf(d []time.Duration) float64 {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m.Seconds()
}

func maxOf(d []time.Duration) float64 {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m.Seconds()
}

// podWatch records, from a watch of the namespace's pods, when each step
// of a pod's life was first seen.
type podWatch struct {
	mu     sync.Mutex
	events []podEvent
}

type podEvent struct {
	at    time.Time
	kind  watch.EventType
	uid   types.UID
	node  string
	phase corev1.PodPhase
	ready bool
}

// moveSteps is one move as the watch saw it.
type moveSteps struct {
	gone, created, scheduled, running, ready time.Time
}

func watchPods(ns string) *podWatch {
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	kube := kubernetes.NewForConfigOrDie(cfg)
	w := &podWatch{}
	go func() {
		for {
			wi, err := kube.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: "app=db"})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				e := podEvent{at: time.Now(), kind: ev.Type, uid: p.UID, node: p.Spec.NodeName, phase: p.Status.Phase}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						e.ready = true
					}
				}
				w.mu.Lock()
				w.events = append(w.events, e)
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// steps finds, after start, the old pod's deletion and the first sight
// of each step of the pod that replaced it.
func (w *podWatch) steps(old types.UID, start time.Time) (moveSteps, error) {
	deadline := time.Now().Add(10 * time.Second) // the watch may trail the poll that saw the pod ready
	for {
		w.mu.Lock()
		var st moveSteps
		first := func(at *time.Time, t time.Time) {
			if at.IsZero() {
				*at = t
			}
		}
		for _, e := range w.events {
			if e.at.Before(start) {
				continue
			}
			switch {
			case e.uid == old && e.kind == watch.Deleted:
				first(&st.gone, e.at)
			case e.uid != old && e.kind != watch.Deleted:
				first(&st.created, e.at)
				if e.node != "" {
					first(&st.scheduled, e.at)
				}
				if e.phase == corev1.PodRunning {
					first(&st.running, e.at)
				}
				if e.ready {
					first(&st.ready, e.at)
				}
			}
		}
		w.mu.Unlock()
		if !st.gone.IsZero() && !st.ready.IsZero() {
			// A step the API server merged into the next is seen with it.
			first(&st.running, st.ready)
			first(&st.scheduled, st.running)
			first(&st.created, st.scheduled)
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("the watch saw no deletion of the old pod or no ready new one (%+v)", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// write writes 1 MiB of random data to /data/blob and syncs; it returns
// the checksum as the pod reads it.
func write(ns, pod string) string {
	must("", "-n", ns, "exec", pod, "--", "sh", "-c", "dd if=/dev/urandom of=/data/blob bs=1024 count=1024 2>/dev/null && sync")
	return read(ns, pod)
}

func read(ns, pod string) string {
	out, err := kubectl("", "-n", ns, "exec", pod, "--", "sha256sum", "/data/blob")
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return strings.Fields(out)[0]
}

// waitPod waits for the Running, Ready pod of the StatefulSet on a node
// other than not; it polls the API server (every 100 ms: the move's
// timing rests on it).
func waitPod(ns, not string, timeout time.Duration) (string, string) {
	var pod, node string
	waitFor("the pod running on another node", timeout, func() bool {
		out, err := kubectl("", "-n", ns, "get", "pods", "-l", "app=db", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err != nil {
			return false
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 4 && f[2] == "Running" && f[3] == "True" && f[1] != not {
				pod, node = f[0], f[1]
				return true
			}
		}
		return false
	})
	return pod, node
}

func waitFor(what string, timeout time.Duration, cond func() bool) {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("timed out after %s waiting for %s", timeout, what))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func statefulSet(class string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  serviceName: db
  template:
    metadata: {labels: {app: db}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: c
        image: ferry-test:dev
        imagePullPolicy: Never
        command: [sh, -c, "sleep 100000"]
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: %s
      resources: {requests: {storage: 64Mi}}
`, class)
}

// diagnose prints the volume's state and every pool's snapshots of it.
func diagnose(vol string) {
	out, _ := kubectl("", "get", "rv", vol, "-o", "jsonpath={.status}")
	fmt.Fprintln(os.Stderr, "state:", out)
	z, _ := exec.Command("sh", "-c", "zfs list -t all -o name,guid,written,mountpoint 2>/dev/null | grep "+vol+" || zfs list -t all -o name,guid,mountpoint | grep "+vol).CombinedOutput()
	fmt.Fprintln(os.Stderr, string(z))
}

func kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(*kubectlBin, append([]string{"--kubeconfig", *kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func must(stdin string, args ...string) string {
	out, err := kubectl(stdin, args...)
	if err != nil {
		fail(err)
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-move:", err)
	failed = true
	cleanup()
	os.Exit(1)
}
