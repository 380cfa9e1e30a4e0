//go:build cluster

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// install applies the cluster overlay of the source tree dir (a
// release's manifests), its ferry:dev images named image instead when
// image is set, and waits until the node DaemonSet's rollout is done.
// With pull set, every new daemon pod first waits that long in an init
// container, as for a slow image pull.
func install(t *testing.T, dir, image string, pull time.Duration) {
	t.Helper()
	out, err := exec.Command(kubectlBin, "--kubeconfig", kubeconfig, "kustomize", filepath.Join(dir, "tests/cluster/overlay")).Output()
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	manifests := string(out)
	if image != "" {
		// (An earlier commit names ferry:dev, a later one the qualified name.)
		manifests = regexp.MustCompile(`image: (ghcr\.io/ferry-csi/)?ferry:dev\b`).ReplaceAllString(manifests, "image: "+image)
	}
	if pull > 0 {
		manifests = slowPull(t, manifests, pull)
	}
	must(t, manifests, "apply", "-f", "-")
	// The DaemonSet as these manifests say it, whole: an apply over the
	// Helm release that installed the cluster keeps what Helm set and
	// the manifests leave out (an environment variable of a later
	// release, which an earlier one reads).
	must(t, daemonSetDoc(t, manifests), "replace", "-f", "-")
	must(t, "", "-n", "ferry-system", "rollout", "status", "daemonset/ferry-node", "--timeout=10m")
}

// daemonSetDoc is the node DaemonSet's document of manifests.
func daemonSetDoc(t *testing.T, manifests string) string {
	t.Helper()
	for _, doc := range strings.Split(manifests, "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if meta, _ := obj["metadata"].(map[string]any); obj["kind"] == "DaemonSet" && meta["name"] == "ferry-node" {
			return doc
		}
	}
	t.Fatal("no DaemonSet ferry-node in the manifests")
	return ""
}

// slowPull gives the node DaemonSet of manifests an init container that
// sleeps d: its new pods start d late, as after a slow image pull.
func slowPull(t *testing.T, manifests string, d time.Duration) string {
	t.Helper()
	docs := strings.Split(manifests, "\n---\n")
	found := false
	for i, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		if obj["kind"] != "DaemonSet" || meta["name"] != "ferry-node" {
			continue
		}
		spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		spec["initContainers"] = []any{map[string]any{"name": "slow-pull", "image": "ferry-test:dev", "imagePullPolicy": "Never",
			"command": []any{"sleep", strconv.Itoa(int(d.Seconds()))}}}
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		docs[i], found = string(b), true
	}
	if !found {
		t.Fatal("no DaemonSet ferry-node in the manifests")
	}
	return strings.Join(docs, "\n---\n")
}

// replicaImages are the images of the volume's replica pods, as run.
func replicaImages(t *testing.T, vol string) []string {
	out, _ := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-l", "ferry.zfs.csi.io/volume="+volumeLabel(vol), "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image}={.status.containerStatuses[0].image}={.status.conditions[?(@.type=="Ready")].status}={.status.containerStatuses[0].imageID}{"\n"}{end}`)
	return strings.Fields(out)
}

// daemonImageIDs are the image IDs the node daemons' ferry containers run
// when their spec names image: a replica pod running one of them runs
// image, whichever of the image's names its status reports (containerd
// reports the first of an image tagged twice, e.g. a version and dev).
func daemonImageIDs(t *testing.T, image string) map[string]bool {
	out, _ := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o",
		`jsonpath={range .items[*]}{.spec.containers[0].image}={.status.containerStatuses[?(@.name=="ferry")].imageID}{"\n"}{end}`)
	ids := map[string]bool{}
	for _, l := range strings.Fields(out) {
		if img, id, ok := strings.Cut(l, "="); ok && img == image && id != "" {
			ids[id] = true
		}
	}
	return ids
}

// The upgrade (README: Upgrade): Ferry installed at an earlier commit
// (its manifests and its image), a pod writing to a replicated volume, then Ferry rolled to this
// commit's image (the DaemonSet with a surge, each new daemon pod started
// 15 s late as after a slow pull; the volume managers by the daemons): no takeover (the same primary and epoch throughout), no
// fence, the writer never restarted nor paused longer than the volume's
// snapshot interval, no write lost, and every volume manager on the new
// image.
func TestUpgradeMovesNothing(t *testing.T) {
	from, fromDir := os.Getenv("FERRY_UPGRADE_FROM_IMAGE"), os.Getenv("FERRY_UPGRADE_FROM_DIR")
	if from == "" || fromDir == "" {
		t.Fatal("FERRY_UPGRADE_FROM_IMAGE or FERRY_UPGRADE_FROM_DIR is not set: run make e2e-upgrade (it builds the earlier commit)")
	}
	const to = "ghcr.io/ferry-csi/ferry:dev"
	install(t, fromDir, from, 0)
	t.Cleanup(func() {
		if t.Failed() {
			install(t, "../../..", "", 0) // leave the cluster on this commit
		}
	})

	ns := namespace(t)
	const interval = 2 * time.Second // ferry-rf2's snapshotInterval
	must(t, statefulSetRunning("upg", ` |
          n=$(tail -n 1 /data/log 2>/dev/null | cut -d ' ' -f 1); n=${n:-0}
          exec 3>>/data/log
          while :; do n=$((n+1)); read up _ < /proc/uptime; echo "$n $up" >&3; sleep 0.05; done`), "-n", ns, "apply", "-f", "-")
	pod, primary := podOf(t, ns, "upg", 180*time.Second)
	vol := volumeOf(t, ns, "data-upg-0")
	waitReady(t, vol)
	eventually(t, "the replica pods on the earlier image", 180*time.Second, func() (bool, string) {
		imgs := replicaImages(t, vol)
		for _, i := range imgs {
			if !strings.Contains(i, "="+from+"=") {
				return false, strings.Join(imgs, " ")
			}
		}
		return len(imgs) == 2, strings.Join(imgs, " ")
	})
	before, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	uid := podUID(t, ns, pod)
	fencedBefore, _ := os.ReadFile(fenceLog())

	// Each node's new daemon pod starts 15 s late (three times the
	// Lease): only a surge, the old daemon working on meanwhile, moves
	// nothing.
	start := time.Now()
	// Meanwhile an old daemon pod not rolled yet is made unready (a
	// sidecar of it killed twice: the kubelet restarts it the second
	// time only after a back-off): the DaemonSet surges onto its node at
	// once and deletes it as soon as its successor exists, 15 s before
	// that one's daemon starts. Its daemon keeps the node until then
	// (liveness.Handover: the old release's, so a FERRY_UPGRADE_FROM
	// older than that fails here).
	disturbed, quit := make(chan string, 1), make(chan struct{})
	go func() { disturbed <- unreadyAnOldDaemonPod(t, from, quit) }()
	joined := false
	t.Cleanup(func() { // (install may stop the test first)
		if !joined {
			close(quit)
			<-disturbed
		}
	})
	install(t, "../../..", "", 15*time.Second)
	d := <-disturbed
	joined = true
	if d == "" {
		t.Error("no old daemon pod was deleted before its successor's daemon started: the roll was not disturbed as meant, so the handover it checks was not exercised")
	} else {
		t.Logf("disturbed: %s", d)
	}
	eventually(t, "every replica pod of the volume running "+to, 600*time.Second, func() (bool, string) {
		imgs, ids := replicaImages(t, vol), daemonImageIDs(t, to)
		for _, i := range imgs {
			f := strings.Split(i, "=")
			if len(f) != 5 || f[1] != to || strings.TrimPrefix(strings.TrimPrefix(f[2], "docker.io/"), "library/") != to && !ids[f[4]] || f[3] != "True" {
				return false, strings.Join(imgs, " ")
			}
		}
		return len(imgs) == 2, strings.Join(imgs, " ")
	})
	took := time.Since(start)
	// Each new daemon did nothing before the old one stopped: its lock
	// came first.
	// (An old pod still terminating is not one of them.)
	pods := must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{"\n"}{end}`)
	for _, l := range strings.Split(strings.TrimSpace(pods), "\n") {
		f := strings.Fields(l)
		if len(f) != 1 {
			continue // being deleted
		}
		p := f[0]
		logs, err := kubectl(t, "", "-n", "ferry-system", "logs", p, "-c", "ferry")
		if err != nil {
			if strings.Contains(logs+err.Error(), "NotFound") {
				continue // gone meanwhile
			}
			t.Fatalf("logs of %s: %v %s", p, err, logs)
		}
		lock, serve := strings.Index(logs, "this daemon has the node"), strings.Index(logs, `"serving csi"`)
		if lock < 0 || serve < 0 || serve < lock || strings.Contains(logs[lock:], "waiting for the node's other daemon") {
			t.Errorf("daemon %s served before it had the node (lock at %d, csi at %d)", p, lock, serve)
			continue
		}
		// And it started while the old one still ran: the surge kept the
		// old pod until the new one's daemon waited on the lock. (An old
		// pod unready for a moment, a sidecar of it restarting, is
		// deleted by the DaemonSet at once: its node then has no daemon
		// for the whole of the new pod's pull. An earlier release whose
		// sidecars dial the kubelet's socket, not their pod's own, has
		// them exit once their daemon is replaced, FERRY_UPGRADE_FROM
		// older than --csi-sidecar-endpoint may fail here.)
		if line, _, _ := strings.Cut(logs[lock:], "\n"); !strings.Contains(line, `"heldByOther":true`) {
			t.Errorf("daemon %s found its node without a daemon: the old one had stopped before it started, so the node had none meanwhile: %s", p, line)
		}
	}

	after, err := getRV(t, vol)
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Epoch != before.Status.Epoch || after.Status.Primary != primary || activeCount(after) != 1 {
		t.Errorf("a takeover or handover during the upgrade: before epoch %d primary %s, after %+v", before.Status.Epoch, primary, after.Status)
	}
	if fencedAfter, _ := os.ReadFile(fenceLog()); string(fencedAfter) != string(fencedBefore) {
		t.Errorf("a node was fenced during the upgrade: %s", fencedAfter)
	}
	if ev := volumeEvents(t, vol); strings.Contains(ev, "Fenced") || strings.Contains(ev, "TookOver") || strings.Contains(ev, "PodsEvicted") || strings.Contains(ev, "Unfenced") {
		t.Errorf("fence or takeover events during the upgrade:\n%s", ev)
	}
	if got := podUID(t, ns, pod); got != uid {
		t.Errorf("the writer pod was replaced during the upgrade (uid %s, was %s)", got, uid)
	}
	if rc := must(t, "", "-n", ns, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].restartCount}"); strings.TrimSpace(rc) != "0" {
		t.Errorf("the writer restarted %s times during the upgrade", rc)
	}
	// The writer's pauses, from its own log (a line every 50 ms, with the
	// host's uptime: busybox's date has no sub-second format), over the
	// lines written since the roll began.
	out := must(t, "", "-n", ns, "exec", pod, "--", "cat", "/data/log")
	upNow := must(t, "", "-n", ns, "exec", pod, "--", "cat", "/proc/uptime")
	nowUp, _ := strconv.ParseFloat(strings.Fields(upNow)[0], 64)
	since := int64(nowUp*1000) - time.Since(start).Milliseconds()
	var last, pause int64
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		up, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		ms := int64(up * 1000)
		if ms >= since {
			lines++
			if last != 0 {
				pause = max(pause, ms-last)
			}
		}
		last = ms
	}
	if lines < int(took/(100*time.Millisecond)) {
		t.Errorf("the writer wrote %d lines during the %s upgrade: it stopped", lines, took)
	}
	if time.Duration(pause)*time.Millisecond > interval {
		t.Errorf("the writer paused %d ms during the upgrade, more than the snapshot interval %s", pause, interval)
	}
	// No write lost: stopped, the other copy holds the last line written.
	must(t, "", "-n", ns, "scale", "statefulset", "upg", "--replicas=0")
	var lost int
	eventually(t, "both copies hold the writer's last line", 180*time.Second, func() (bool, string) {
		rv, err := getRV(t, vol)
		if err != nil || activeCount(rv) != 0 || len(rv.Status.Replicas) != 2 {
			return false, fmt.Sprintf("%+v %v", rv.Status, err)
		}
		var lasts []int
		for _, r := range rv.Status.Replicas {
			b, err := exec.Command("tail", "-n", "1", hostLogPath(t, r.Node, vol)).Output()
			if err != nil {
				return false, err.Error()
			}
			n, _ := strconv.Atoi(strings.Fields(string(b) + " 0")[0])
			lasts = append(lasts, n)
		}
		lost = max(lasts[0]-lasts[1], lasts[1]-lasts[0])
		return lost == 0, fmt.Sprintf("last lines %v", lasts)
	})
	fmt.Printf("upgrade: %.1f s, pause max %.1f s, lost writes: %d\n", took.Seconds(), float64(pause)/1000, lost)
}

// daemonPod is a node daemon pod as the disturbance reads it.
type daemonPod struct {
	Metadata struct {
		Name              string  `json:"name"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName   string `json:"nodeName"`
		Containers []struct {
			Name  string `json:"name"`
			Image string `json:"image"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		ContainerStatuses []struct {
			Name         string `json:"name"`
			ContainerID  string `json:"containerID"`
			RestartCount int    `json:"restartCount"`
			State        struct {
				Running *struct{} `json:"running"`
			} `json:"state"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p daemonPod) image() string {
	for _, c := range p.Spec.Containers {
		if c.Name == "ferry" {
			return c.Image
		}
	}
	return ""
}

func (p daemonPod) container(name string) (id string, restarts int, running bool) {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return strings.TrimPrefix(c.ContainerID, "containerd://"), c.RestartCount, c.State.Running != nil
		}
	}
	return "", 0, false
}

func daemonPods(t *testing.T) []daemonPod {
	out, err := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "json")
	if err != nil {
		return nil
	}
	var l struct {
		Items []daemonPod `json:"items"`
	}
	if json.Unmarshal([]byte(out), &l) != nil {
		return nil
	}
	return l.Items
}

// unreadyAnOldDaemonPod waits, during a roll away from image from, until
// the DaemonSet has begun (a pod not on from), then kills the
// csi-snapshotter of an old pod on a node not rolled yet twice (through
// that node's containerd), and watches that pod: it returns "<pod> on
// <node>" once the DaemonSet deleted it while its successor's daemon had
// not started, "" if that did not happen within the roll.
func unreadyAnOldDaemonPod(t *testing.T, from string, quit <-chan struct{}) string {
	deadline := time.Now().Add(5 * time.Minute)
	pause := func() bool { // false: the test is over
		select {
		case <-quit:
			return false
		case <-time.After(200 * time.Millisecond):
			return true
		}
	}
	var victim daemonPod
	for victim.Metadata.Name == "" {
		if time.Now().After(deadline) {
			t.Log("disturbance: the roll never began")
			return ""
		}
		if !pause() {
			return ""
		}
		pods := daemonPods(t)
		rolling := map[string]bool{}
		for _, p := range pods {
			if p.image() != from {
				rolling[p.Spec.NodeName] = true
			}
		}
		if len(rolling) == 0 {
			continue
		}
		for _, p := range pods {
			if _, _, running := p.container("csi-snapshotter"); p.image() == from && !rolling[p.Spec.NodeName] && p.Metadata.DeletionTimestamp == nil && running {
				victim = p
				break
			}
		}
	}
	kill := func(p daemonPod) bool {
		id, _, _ := p.container("csi-snapshotter")
		sock := filepath.Join(envOr("FERRY_E2E_DIR", "/var/lib/ferry-e2e"), "nodes", p.Spec.NodeName, "containerd", "containerd.sock")
		out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id).CombinedOutput()
		if err != nil {
			t.Logf("disturbance: kill the csi-snapshotter of %s: %v %s", p.Metadata.Name, err, out)
			return false
		}
		return true
	}
	if !kill(victim) {
		return ""
	}
	name, node := victim.Metadata.Name, victim.Spec.NodeName
	killedAgain := false
	for time.Now().Before(deadline) {
		if !pause() {
			return ""
		}
		var old, next *daemonPod
		for _, p := range daemonPods(t) {
			switch {
			case p.Metadata.Name == name:
				old = &p
			case p.Spec.NodeName == node && p.Metadata.DeletionTimestamp == nil:
				next = &p
			}
		}
		if old == nil {
			t.Logf("disturbance: %s is gone", name)
			return ""
		}
		if old.Metadata.DeletionTimestamp != nil {
			if next == nil {
				continue // the successor not listed yet
			}
			if _, _, running := next.container("ferry"); running {
				t.Logf("disturbance: %s was deleted only once %s's daemon ran", name, next.Metadata.Name)
				return ""
			}
			return name + " on " + node
		}
		if _, restarts, running := old.container("csi-snapshotter"); !killedAgain && restarts >= 1 && running {
			// Restarted at once the first time; the second time only
			// after the kubelet's back-off, long enough for the
			// DaemonSet to see the pod unready.
			if !kill(*old) {
				return ""
			}
			killedAgain = true
		}
	}
	return ""
}
