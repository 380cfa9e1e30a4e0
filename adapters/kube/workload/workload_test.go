package workload

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/volume"
)

var tpl = Template{Namespace: "ferry-system", Image: "ferry:dev", ServiceAccount: "ferry-replica", PriorityClass: "ferry-replica",
	Args: []string{"--pool=ferry"}}

func writes(c *fake.Clientset) (n int) {
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			n++
		}
	}
	return n
}

func TestEnsureCreatesThenScalesAndWritesNothingWhenInLine(t *testing.T) {
	c := fake.NewClientset()
	a := New(c, nil, tpl)
	ctx := context.Background()
	owner := Owner{Volume: "pvc-1", Name: "pvc-1", UID: "uid-1"}
	if err := a.Ensure(ctx, owner, placement.Objects{Secondaries: 2, MinAvailable: 1}, "30s"); err != nil {
		t.Fatal(err)
	}
	if writes(c) != 3 {
		t.Fatalf("%d writes to create, want 3 (the ReplicaSet, its budget and the primaries' budget)", writes(c))
	}
	if pdb, err := c.PolicyV1().PodDisruptionBudgets("ferry-system").Get(ctx, "ferry-pvc-1-primary", metav1.GetOptions{}); err != nil ||
		pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 0 || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != ComponentPrimary {
		t.Fatalf("the primaries' budget: %+v %v", pdb, err)
	}
	before := writes(c)
	if err := a.Ensure(ctx, owner, placement.Objects{Secondaries: 2, MinAvailable: 1}, "30s"); err != nil {
		t.Fatal(err)
	}
	if writes(c) != before {
		t.Fatalf("%d writes when nothing changed, want 0", writes(c)-before)
	}
	if err := a.Ensure(ctx, owner, placement.Objects{Secondaries: 1, MinAvailable: 0}, "30s"); err != nil {
		t.Fatal(err)
	}
	rs, _ := c.AppsV1().ReplicaSets("ferry-system").Get(ctx, "ferry-pvc-1", metav1.GetOptions{})
	pdb, _ := c.PolicyV1().PodDisruptionBudgets("ferry-system").Get(ctx, "ferry-pvc-1", metav1.GetOptions{})
	if *rs.Spec.Replicas != 1 || pdb.Spec.MinAvailable.IntValue() != 0 {
		t.Fatalf("after scaling: replicas %d, minAvailable %v", *rs.Spec.Replicas, pdb.Spec.MinAvailable)
	}
	for _, act := range c.Actions()[before:] {
		if p, ok := act.(k8stesting.PatchAction); ok && !strings.Contains(string(p.GetPatch()), `"spec"`) {
			t.Errorf("a patch outside spec: %s", p.GetPatch())
		}
	}
}

func TestTheReplicaPodsSpreadOnFerryNodesAndBelongToTheVolume(t *testing.T) {
	a := New(fake.NewClientset(), nil, tpl)
	owner := Owner{Volume: "pvc-1", Name: "pvc-1", UID: "uid-1"}
	rs := a.ReplicaSet(owner, placement.Objects{Secondaries: 3}, "10s")
	pod := rs.Spec.Template.Spec
	anti := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].TopologyKey != "kubernetes.io/hostname" || anti[0].LabelSelector.MatchLabels[rvapi.LabelVolume] != rvapi.Hash("pvc-1") {
		t.Errorf("anti-affinity %+v", anti)
	}
	node := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(node) != 1 || node[0].MatchExpressions[0].Key != TopologyKey {
		t.Errorf("node affinity %+v", node)
	}
	// A new pod prefers a node whose copy is usable (no full transfer to a
	// node that holds none while such a copy waits for its pod).
	pref := pod.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
	if len(pref) != 1 || len(pref[0].Preference.MatchExpressions) != 1 ||
		pref[0].Preference.MatchExpressions[0].Key != rvapi.UsableLabel("pvc-1") ||
		!slices.Equal(pref[0].Preference.MatchExpressions[0].Values, []string{rvapi.UsableValue}) {
		t.Errorf("preferred node affinity %+v", pref)
	}
	for k, v := range rs.Spec.Selector.MatchLabels {
		if rs.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s not on the template", k, v)
		}
	}
	args := pod.Containers[0].Args
	for _, want := range []string{"volume-manager", "--volume=pvc-1", "--cluster-state=kubernetes", "--snapshot-interval=10s", "--pool=ferry", "--probe-listen=:9808"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %v lack %s", args, want)
		}
	}
	if pod.Containers[0].ReadinessProbe.HTTPGet.Path != "/ready" || pod.PriorityClassName != "ferry-replica" {
		t.Errorf("probe %+v, priority class %q", pod.Containers[0].ReadinessProbe, pod.PriorityClassName)
	}
	if len(rs.OwnerReferences) != 1 || rs.OwnerReferences[0].Kind != rvapi.Kind || rs.OwnerReferences[0].UID != "uid-1" {
		t.Errorf("owner %+v", rs.OwnerReferences)
	}
	if pod.HostPID {
		t.Error("the host's pid namespace without the template's hostPID")
	}
	withPID := tpl
	withPID.HostPID = true
	if !New(fake.NewClientset(), nil, withPID).ReplicaSet(owner, placement.Objects{}, "").Spec.Template.Spec.HostPID {
		t.Error("the template's hostPID (the watchdog's fence must see the pods' processes) is not the pods'")
	}
}

func TestNamesFitPodNames(t *testing.T) {
	if n := Name("pvc-0b6f1c0e-4a51-4f0c-9d0e-2f3b1a5c6d7e"); n != "ferry-pvc-0b6f1c0e-4a51-4f0c-9d0e-2f3b1a5c6d7e" {
		t.Errorf("Name = %q", n)
	}
	for _, id := range []string{"Upper_Case", strings.Repeat("a", 100), "a.b"} {
		if n := Name(rvapiID(id)); len(n) > 52 || !strings.HasPrefix(n, "ferry-rv-") {
			t.Errorf("Name(%q) = %q", id, n)
		}
	}
}

func rvapiID(s string) volume.ID { return volume.ID(s) }

// The volume managers count the lag the daemon's survivors count: the
// daemon's --allowed-lag is rendered into every replica pod, and a
// template that sets it (or the snapshot interval, the volume's spec's)
// itself is refused.
func TestTheAllowedLagHasOneSourceTheDaemons(t *testing.T) {
	withLag := tpl
	withLag.AllowedLag = 3
	args := New(fake.NewClientset(), nil, withLag).ReplicaSet(Owner{Volume: "pvc-1", Name: "pvc-1", UID: "u"}, placement.Objects{Secondaries: 1}, "").Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--allowed-lag=3") {
		t.Errorf("args %v lack the daemon's --allowed-lag=3", args)
	}
	dir := t.TempDir()
	for _, arg := range []string{"--allowed-lag=5", "--allowed-lag", "--snapshot-interval=10s"} {
		path := filepath.Join(dir, "tpl.yaml")
		if err := os.WriteFile(path, []byte("namespace: ferry-system\nimage: ferry:dev\nserviceAccount: ferry-replica\nargs: ['--pool=ferry', '"+arg+"']\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTemplate(path); err == nil || !strings.Contains(err.Error(), "must not set") {
			t.Errorf("a template setting %s: %v", arg, err)
		}
	}
	path := filepath.Join(dir, "ok.yaml")
	if err := os.WriteFile(path, []byte("namespace: ferry-system\nimage: ferry:dev\nserviceAccount: ferry-replica\nargs: ['--pool=ferry', '--allowed-lagged=1']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTemplate(path); err != nil {
		t.Errorf("a template with an unrelated flag: %v", err)
	}
}

// The volume managers run the host's zfs where the daemon does: the
// daemon's --host-root reaches every replica pod as $FERRY_HOST_ROOT (an
// environment variable, which a volume manager of an earlier release,
// renewed in place by a rollback, ignores), none without it, and a
// template that sets --host-root itself is refused.
func TestTheHostRootIsTheDaemons(t *testing.T) {
	owner := Owner{Volume: "pvc-1", Name: "pvc-1", UID: "u"}
	hostRoot := func(tp Template) (string, bool) {
		for _, e := range New(fake.NewClientset(), nil, tp).ReplicaSet(owner, placement.Objects{Secondaries: 1}, "").Spec.Template.Spec.Containers[0].Env {
			if e.Name == "FERRY_HOST_ROOT" {
				return e.Value, true
			}
		}
		return "", false
	}
	if v, ok := hostRoot(tpl); ok {
		t.Errorf("FERRY_HOST_ROOT=%q in a pod of a daemon without --host-root", v)
	}
	with := tpl
	with.HostRoot = "/host"
	if v, ok := hostRoot(with); !ok || v != "/host" {
		t.Errorf("FERRY_HOST_ROOT = %q (%v), want the daemon's /host", v, ok)
	}
	path := filepath.Join(t.TempDir(), "tpl.yaml")
	if err := os.WriteFile(path, []byte("namespace: ferry-system\nimage: ferry:dev\nserviceAccount: ferry-replica\nargs: ['--pool=ferry', '--host-root=/x']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTemplate(path); err == nil || !strings.Contains(err.Error(), "must not set") {
		t.Errorf("a template setting --host-root: %v", err)
	}
}

// The daemon's --replica-metrics-listen reaches every volume manager as
// an environment variable (a flag would stop an earlier release's volume
// manager that a rollback renews in place), with the scrape annotations
// on its pod; without it, neither.
func TestTheVolumeManagersMetricsEndpointIsTheDaemons(t *testing.T) {
	owner := Owner{Volume: "pvc-1", Name: "pvc-1", UID: "u"}
	render := func(tp Template) (map[string]string, string) {
		pt := New(fake.NewClientset(), nil, tp).ReplicaSet(owner, placement.Objects{Secondaries: 1}, "").Spec.Template
		for _, e := range pt.Spec.Containers[0].Env {
			if e.Name == "FERRY_METRICS_LISTEN" {
				return pt.Annotations, e.Value
			}
		}
		for _, a := range pt.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--metrics-listen") {
				t.Errorf("a flag %s in the volume manager's args", a)
			}
		}
		return pt.Annotations, ""
	}
	if ann, env := render(tpl); env != "" || ann["prometheus.io/scrape"] != "" || ann["ferry.zfs.csi.io/volume-id"] != "pvc-1" {
		t.Errorf("without --replica-metrics-listen: env %q, annotations %v", env, ann)
	}
	with := tpl
	with.MetricsListen = ":9809"
	ann, env := render(with)
	if env != ":9809" || ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9809" || ann["prometheus.io/path"] != "/metrics" || ann["ferry.zfs.csi.io/volume-id"] != "pvc-1" {
		t.Errorf("with :9809: env %q, annotations %v", env, ann)
	}
}
