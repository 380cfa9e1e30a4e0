//go:build cluster

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scrape reads a pod's metrics endpoint through the API server's proxy,
// as `kubectl get --raw` does.
func scrape(t *testing.T, pod string, port int) (string, error) {
	return kubectl(t, "", "get", "--raw", "/api/v1/namespaces/ferry-system/pods/"+pod+":"+strconv.Itoa(port)+"/proxy/metrics")
}

// sample is the value of the series name{labels...} in a scrape (every
// label given must match; others may be there); ok false when absent.
func sample(metrics, name string, labels ...string) (float64, bool) {
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		all := true
		for _, want := range labels {
			all = all && strings.Contains(l, want)
		}
		if !all {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// A replicated claim in use, as the metrics tell it: the daemon of the
// primary's node counts its publish and its zfs commands and reads its
// pool; each replica pod says which copy it is (the primary, a ready
// secondary) and the snapshot it holds, which goes on growing.
func TestTheMetricsOfAReplicatedVolumeInUse(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("metrics"), "-n", ns, "apply", "-f", "-")
	_, primary := podOf(t, ns, "metrics", 180*time.Second)
	vol := volumeOf(t, ns, "data-metrics-0")
	waitReady(t, vol)

	daemon := strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node",
		"--field-selector", "spec.nodeName="+primary, "-o", "jsonpath={.items[0].metadata.name}"))
	eventually(t, "the primary's daemon's metrics", 60*time.Second, func() (bool, string) {
		m, err := scrape(t, daemon, 9808)
		if err != nil {
			return false, err.Error()
		}
		publishes, _ := sample(m, "ferry_csi_calls_total", `method="NodePublishVolume"`, `code="OK"`)
		up, _ := sample(m, "ferry_pool_up", `node="`+primary+`"`, `pool="ferry-`+primary+`"`)
		size, _ := sample(m, "ferry_pool_size_bytes", `node="`+primary+`"`)
		gets, _ := sample(m, "ferry_zfs_commands_total", `command="zfs get"`, `result="ok"`)
		return publishes >= 1 && up == 1 && size > 0 && gets >= 1,
			strings.Join(regexp.MustCompile(`(?m)^ferry_(csi_calls_total|pool_\w+|zfs_commands_total)\{.*$`).FindAllString(m, 20), "; ")
	})

	pods := strings.Fields(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "ferry.zfs.csi.io/volume="+volumeLabel(vol), "-o",
		`jsonpath={range .items[*]}{.metadata.name}={.spec.nodeName} {end}`))
	if len(pods) != 2 {
		t.Fatalf("replica pods of %s: %v, want 2", vol, pods)
	}
	first := map[string]float64{}
	for _, p := range pods {
		name, node, _ := strings.Cut(p, "=")
		eventually(t, "the metrics of "+name, 60*time.Second, func() (bool, string) {
			m, err := scrape(t, name, 9809)
			if err != nil {
				return false, err.Error()
			}
			l := []string{`volume="` + vol + `"`, `node="` + node + `"`}
			snap, ok1 := sample(m, "ferry_replica_snapshot", l...)
			isPrimary, ok2 := sample(m, "ferry_replica_primary", l...)
			ready, ok3 := sample(m, "ferry_replica_ready", l...)
			want := 0.0
			if node == primary {
				want = 1
			}
			first[name] = snap
			return ok1 && ok2 && ok3 && snap > 0 && isPrimary == want && (node == primary || ready == 1),
				strings.Join(regexp.MustCompile(`(?m)^ferry_replica_\w+\{.*$`).FindAllString(m, -1), "; ")
		})
	}
	// kubectl ferry status says the same: the claim, both copies, the
	// primary's marked.
	eventually(t, "kubectl ferry status lists the volume", 60*time.Second, func() (bool, string) {
		cmd := exec.Command("../../../bin/kubectl-ferry", "--kubeconfig", kubeconfig, "status")
		b, err := cmd.CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, b)
		}
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) >= 9 && f[0] == vol {
				return f[1] == ns+"/data-metrics-0" && f[4] == primary && strings.Contains(f[5], primary+":") && strings.Contains(f[5], "*") &&
					strings.Count(f[5], ":") == 2, l
			}
		}
		return false, string(b)
	})

	// The copies go on: each one's snapshot grows.
	for _, p := range pods {
		name, _, _ := strings.Cut(p, "=")
		eventually(t, "a newer snapshot in the metrics of "+name, 60*time.Second, func() (bool, string) {
			m, err := scrape(t, name, 9809)
			if err != nil {
				return false, err.Error()
			}
			snap, _ := sample(m, "ferry_replica_snapshot", `volume="`+vol+`"`)
			return snap > first[name], strconv.FormatFloat(snap, 'f', 0, 64)
		})
	}
}
