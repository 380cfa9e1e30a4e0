// Command cluster is the demo's second act, on the local Kubernetes
// cluster (make demo-cluster brings it up): a claim of a replicated
// StorageClass (two copies), a pod writing to it, `kubectl get rv`, the
// pod moved to the other copy's node, and the data shown intact there,
// with the move's time; then the third act: the node the pod runs on is
// killed (power loss: tests/cluster/node.sh), and the pod runs on the
// other copy's node within seconds, with the time and the writes lost
// printed; the node comes back, its copy rejoining (or leaving as surplus
// when a copy was made on the third node meanwhile). It removes what it
// made.
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
	"strings"
	"time"
)

var (
	kubectlBin = flag.String("kubectl", filepath.Join(os.Getenv("HOME"), ".cache/ferry/k8s-v1.37.2/kubectl"), "kubectl")
	kubeconfig = flag.String("kubeconfig", envOr("KUBECONFIG", "/var/lib/ferry-e2e/kubeconfig"), "the cluster's kubeconfig")
)

func main() {
	flag.Parse()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	ns := "demo-" + hex.EncodeToString(b)
	var cordoned string
	cleanup = func() {
		restore()
		if cordoned != "" {
			_, _ = kubectl("", "uncordon", cordoned)
		}
		_, _ = kubectl("", "delete", "namespace", ns, "--wait=true", "--timeout=120s")
	}
	defer cleanup()

	step("a namespace and a StatefulSet whose claim asks for two copies (StorageClass ferry-rf2)")
	must("", "create", "namespace", ns)
	must(statefulSet, "-n", ns, "apply", "-f", "-")
	pod, node := waitPod(ns, "")
	vol := strings.TrimSpace(must("", "-n", ns, "get", "pvc", "data-db-0", "-o", "jsonpath={.spec.volumeName}"))
	say("pod %s runs on %s with volume %s", pod, node, vol)

	step("the pod writes")
	must("", "-n", ns, "exec", pod, "--", "sh", "-c", "echo 'written on "+node+" at '$(date -u +%T) > /data/hello && dd if=/dev/urandom of=/data/blob bs=1024 count=2048 2>/dev/null && sync")
	sum := strings.Fields(must("", "-n", ns, "exec", pod, "--", "sha256sum", "/data/blob"))[0]
	say("/data/hello: %s", strings.TrimSpace(must("", "-n", ns, "exec", pod, "--", "cat", "/data/hello")))
	say("/data/blob:  2 MiB, sha256 %s", sum)

	step("the second copy catches up (kubectl get rv)")
	waitFor("two ready copies of a snapshot", func() bool {
		out, _ := kubectl("", "get", "rv", vol, "-o", "jsonpath={.status.readyReplicas} {.status.newest}")
		f := strings.Fields(out)
		return len(f) == 2 && f[0] == "2"
	})
	fmt.Print(indent(must("", "get", "rv", vol)))

	step("the pod moves: " + node + " is cordoned and the pod deleted; the StatefulSet re-creates it")
	must("", "cordon", node)
	cordoned = node
	start := time.Now()
	must("", "-n", ns, "delete", "pod", pod, "--wait=false")
	pod, to := waitPod(ns, node)
	got := strings.Fields(must("", "-n", ns, "exec", pod, "--", "sha256sum", "/data/blob"))[0]
	took := time.Since(start)
	say("pod %s runs on %s", pod, to)
	say("/data/hello: %s", strings.TrimSpace(must("", "-n", ns, "exec", pod, "--", "cat", "/data/hello")))
	say("/data/blob:  sha256 %s (%s)", got, map[bool]string{true: "intact", false: "DIFFERENT"}[got == sum])
	say("moved in %.1f s (pod deleted -> running on %s with its data)", took.Seconds(), to)
	fmt.Print(indent(must("", "get", "rv", vol)))
	if got != sum {
		fail(fmt.Errorf("the data did not move intact"))
	}

	step("node loss: the pod has been appending a number to /data/log every 50 ms; " + node + " is uncordoned (the copy there catches up)")
	must("", "uncordon", node)
	cordoned = ""
	waitFor("both copies ready again, the log in a snapshot", func() bool {
		out, _ := kubectl("", "get", "rv", vol, "-o", `jsonpath={range .status.replicas[*]}{.node} {.ready} {.snapshot}{"\n"}{end}`)
		ready := 0
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[1] == "true" {
				ready++
			}
		}
		return ready == 2
	})
	time.Sleep(5 * time.Second) // a few snapshot intervals of the log
	step("node " + to + " is killed: network cut, kubelet, containerd and every container SIGKILLed")
	dead := to
	restore = func() { _ = exec.Command("tests/cluster/node.sh", "restore", dead).Run() }
	start = time.Now()
	if out, err := exec.Command("tests/cluster/node.sh", "kill", dead).CombinedOutput(); err != nil {
		fail(fmt.Errorf("node.sh kill %s: %v: %s", dead, err, out))
	}
	pod, to = waitPod(ns, dead)
	took = time.Since(start)
	resumed := strings.TrimSpace(must("", "-n", ns, "exec", pod, "--", "tail", "-n", "1", "/data/resumed"))
	out, _ := exec.Command("sh", "-c", fmt.Sprintf("tail -n 1 $(zfs get -H -o value mountpoint ferry-%s/ferry/%s)/log", dead, vol)).Output()
	last := strings.TrimSpace(string(out))
	var r, l int
	fmt.Sscan(resumed, &r)
	fmt.Sscan(last, &l)
	say("pod %s runs on %s; its copy's log ended at %s (the pod resumed after it), the lost node's at %s", pod, to, resumed, last)
	say("failover node-loss: %.1f s (node killed -> pod running on %s with its data)", took.Seconds(), to)
	say("lost writes: %d (%.1f s of appends; the snapshot interval is 2 s)", max(l-r, 0), float64(max(l-r, 0))/20)
	fmt.Print(indent(must("", "get", "rv", vol)))
	step("node " + dead + " comes back: its copy rolls back to the common snapshot and resyncs, or, when the ReplicaSet made a copy on another node while it was away, leaves as surplus (its fenced writes kept aside)")
	restore()
	restore = func() {}
	waitFor("two copies ready, the returned one among them or gone", func() bool {
		out, _ := kubectl("", "get", "rv", vol, "-o", `jsonpath={range .status.replicas[*]}{.node} {.ready}{"\n"}{end}`)
		ready, back, listed := 0, false, false
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) != 2 {
				continue
			}
			if f[1] == "true" {
				ready++
			}
			if f[0] == dead {
				listed, back = true, f[1] == "true"
			}
		}
		return ready == 2 && (back || !listed)
	})
	fmt.Print(indent(must("", "get", "rv", vol)))

	step("cleaning up: the claim's deletion destroys both copies")
	cleanup()
	cleanup = func() {}
	say("done")
}

const statefulSet = `apiVersion: apps/v1
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
        # Appends a number to /data/log every 50 ms, resuming after the
        # last one its copy holds (the node-loss act counts what is lost).
        command:
        - sh
        - -c
        - |
          n=$(tail -n 1 /data/log 2>/dev/null); n=${n:-0}
          echo "$n" >> /data/resumed
          exec 3>>/data/log
          while :; do n=$((n+1)); echo $n >&3; sleep 0.05; done
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: ferry-rf2
      resources: {requests: {storage: 64Mi}}
`

var (
	cleanup = func() {}
	restore = func() {}
)

func step(s string) { fmt.Printf("\n== %s\n", s) }

func say(format string, args ...any) { fmt.Printf("   "+format+"\n", args...) }

func indent(s string) string {
	return "   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n   ") + "\n"
}

func waitPod(ns, not string) (string, string) {
	var pod, node string
	waitFor("the pod running", func() bool {
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

func waitFor(what string, cond func() bool) {
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("timed out waiting for %s", what))
		}
		time.Sleep(100 * time.Millisecond)
	}
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
	fmt.Fprintln(os.Stderr, "demo:", err)
	cleanup()
	os.Exit(1)
}
