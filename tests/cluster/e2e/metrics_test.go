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

// nodeMetric sums a metric over Ferry's pods (the daemons and the
// volume managers) on node, or on every node but not when node is "";
// pods whose metrics cannot be read are skipped. seen lists what each
// pod said.
func nodeMetric(t *testing.T, node, not, name string, labels ...string) (float64, string) {
	t.Helper()
	out, err := kubectl(t, "", "-n", "ferry-system", "get", "pods", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.metadata.labels.app\.kubernetes\.io/component}{"\n"}{end}`)
	if err != nil {
		return 0, err.Error()
	}
	var sum float64
	var seen []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (node != "" && f[1] != node) || (not != "" && f[1] == not) {
			continue
		}
		port := 9809
		if f[2] == "node" {
			port = 9808
		}
		m, err := scrape(t, f[0], port)
		if err != nil {
			continue
		}
		var v float64
		for _, line := range strings.Split(m, "\n") {
			if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
				continue
			}
			all := true
			for _, want := range labels {
				all = all && strings.Contains(line, want)
			}
			if x := strings.Fields(line); all && len(x) > 0 {
				if n, err := strconv.ParseFloat(x[len(x)-1], 64); err == nil {
					v += n
				}
			}
		}
		sum += v
		seen = append(seen, fmt.Sprintf("%s=%g", f[0], v))
	}
	return sum, strings.Join(seen, " ")
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

	// How far each copy is behind, and what it did: the primary took
	// snapshots, the secondary received them; both see two ready copies of
	// two.
	for _, p := range pods {
		name, node, _ := strings.Cut(p, "=")
		eventually(t, "the lag and totals in the metrics of "+name, 60*time.Second, func() (bool, string) {
			m, err := scrape(t, name, 9809)
			if err != nil {
				return false, err.Error()
			}
			l := []string{`volume="` + vol + `"`, `node="` + node + `"`}
			lag, okLag := sample(m, "ferry_replica_lag_seconds", l...)
			age, okAge := sample(m, "ferry_replica_newest_snapshot_age_seconds", l...)
			_, okBehind := sample(m, "ferry_replica_snapshots_behind", l...)
			readyCopies, _ := sample(m, "ferry_volume_ready_copies", l...)
			factor, _ := sample(m, "ferry_volume_replication_factor", l...)
			taken, _ := sample(m, "ferry_snapshots_taken_total", l...)
			transfers, _ := sample(m, "ferry_transfers_total", l...)
			moved, _ := sample(m, "ferry_transferred_bytes_total", l...)
			info, _ := sample(m, "ferry_volume_info", append(l, `claim="data-metrics-0"`, `claim_namespace="`+ns+`"`, `persistentvolume="`+vol+`"`)...)
			done := okLag && okAge && okBehind && lag >= 0 && lag < 120 && age < 120 && readyCopies == 2 && factor == 2 && info == 1
			if node == primary {
				done = done && taken >= 1 && lag == 0
			} else {
				done = done && transfers >= 1 && moved > 0
			}
			return done, strings.Join(regexp.MustCompile(`(?m)^ferry_(replica_(lag|newest|snapshots)|volume|snapshots|transfer)\w*\{.*$`).FindAllString(m, -1), "; ")
		})
	}

	// kubectl ferry doctor finds the cluster healthy: every check of the
	// test cluster passes or warns, none fails.
	doctor, err := exec.Command("../../../bin/kubectl-ferry", "--kubeconfig", kubeconfig, "doctor").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl ferry doctor: %v\n%s", err, doctor)
	}
	for _, want := range []string{"crd ", "admission ", "daemons ", "pool " + primary, "versions ", "volumes "} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `\s*(OK|WARN)\s`).Match(doctor) {
			t.Errorf("kubectl ferry doctor has no passing %q line:\n%s", want, doctor)
		}
	}
	t.Logf("kubectl ferry doctor:\n%s", doctor)

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

// A planned move, as the metrics and events tell it: the copy on the new
// node is promoted (ferry_primary_changes_total{cause="promotion"}, and a
// BecamePrimary event counted), and the volume manager's event reaches the
// claim, where its user looks.
func TestAMoveIsCountedAsAPromotionAndItsEventReachesTheClaim(t *testing.T) {
	ns := namespace(t)
	must(t, statefulSetYAML("moved"), "-n", ns, "apply", "-f", "-")
	pod, first := podOf(t, ns, "moved", 180*time.Second)
	vol := volumeOf(t, ns, "data-moved-0")
	waitReady(t, vol)
	cordon(t, first)
	must(t, "", "-n", ns, "delete", "pod", pod, "--wait=false")
	_, second := podOf(t, ns, "moved", 180*time.Second)
	if second == first {
		t.Fatalf("the pod came back on the cordoned node %s", first)
	}
	name := strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "ferry.zfs.csi.io/volume="+volumeLabel(vol),
		"--field-selector", "spec.nodeName="+second, "-o", "jsonpath={.items[0].metadata.name}"))
	eventually(t, "the promotion in the metrics of "+name, 60*time.Second, func() (bool, string) {
		m, err := scrape(t, name, 9809)
		if err != nil {
			return false, err.Error()
		}
		promotions, _ := sample(m, "ferry_primary_changes_total", `cause="promotion"`)
		became, _ := sample(m, "ferry_events_total", `reason="BecamePrimary"`)
		isPrimary, _ := sample(m, "ferry_replica_primary", `node="`+second+`"`)
		return promotions >= 1 && became >= 1 && isPrimary == 1,
			strings.Join(regexp.MustCompile(`(?m)^ferry_(primary_changes_total|events_total|replica_primary)\{.*$`).FindAllString(m, -1), "; ")
	})
	eventually(t, "the BecamePrimary event on the claim", 60*time.Second, func() (bool, string) {
		out, err := kubectl(t, "", "-n", ns, "get", "events", "--field-selector", "involvedObject.kind=PersistentVolumeClaim,involvedObject.name=data-moved-0,reason=BecamePrimary",
			"-o", "jsonpath={range .items[*]}{.source.host} {.message}{\"\\n\"}{end}")
		return err == nil && strings.Contains(out, "replica on "+second), out
	})
	// kubectl ferry describe, by the claim: the new primary, both copies,
	// the promotion among the events.
	out, err := exec.Command("../../../bin/kubectl-ferry", "--kubeconfig", kubeconfig, "describe", ns+"/data-moved-0").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl ferry describe: %v\n%s", err, out)
	}
	for _, want := range []string{"Volume:              " + vol, "Claim:               " + ns + "/data-moved-0", "Primary:             " + second,
		"  " + first + "  ", "  " + second + "  primary", "BecamePrimary"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl ferry describe lacks %q:\n%s", want, out)
		}
	}
}
