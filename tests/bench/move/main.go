// Command move measures a planned move on the running local cluster (make
// cluster-up cluster-deploy): a StatefulSet's pod with a replicated claim
// writes a file, its node is cordoned and the pod deleted, and the time
// until the re-created pod runs on another node and reads the file back
// intact is one move (the kubelet's own steps included: unmount, the final
// snapshot, scheduling, the handover, mount, container start). It prints
// each move and the median of -moves. Not a pass/fail test: `make
// bench-move`.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
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
	var times []time.Duration
	for i := 0; i < *moves; i++ {
		sum := write(ns, pod)
		if cordoned != "" {
			must("", "uncordon", cordoned)
		}
		must("", "cordon", node)
		cordoned = node
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
		d := time.Since(start)
		times = append(times, d)
		fmt.Printf("move %d: %s -> %s in %.1f s\n", i+1, node, to, d.Seconds())
		node = to
	}
	if failed {
		cleanup()
		fmt.Fprintln(os.Stderr, "bench-move:", failErr)
		os.Exit(1)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	fmt.Printf("move: %.1f s (median of %d; fastest %.1f s, slowest %.1f s)\n", times[len(times)/2].Seconds(), len(times), times[0].Seconds(), times[len(times)-1].Seconds())
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
