//go:build chart

// Package chart checks the Helm chart (deploy/helm/ferry) against the
// kustomize deployment (deploy/, deploy/crds): rendered with its default
// values in the namespace ferry-system (and the namespace made by the
// chart, as deploy/ makes it), the chart makes the same objects,
// field for field, but for the labels and annotations Helm adds to track
// its release. `make test-chart` runs it (it needs helm and kubectl).
package chart

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func tool(t *testing.T, env, def string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = def
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s (set %s): %v; make test-chart builds it", p, env, err)
	}
	return p
}

func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

// objects splits a multi-document YAML stream into objects keyed by
// kind/namespace/name, with the release-tracking metadata removed.
func objects(t *testing.T, stream []byte) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(string(stream), "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(o) == 0 {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		for _, k := range []string{"labels", "annotations"} {
			m, _ := md[k].(map[string]any)
			for key := range m {
				switch key {
				case "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart", "helm.sh/resource-policy",
					// kustomize's common labels (deploy/kustomization.yaml)
					"app.kubernetes.io/name", "app.kubernetes.io/part-of":
					delete(m, key)
				}
			}
			if len(m) == 0 {
				delete(md, k)
			}
		}
		switch o["kind"] {
		case "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "CSIDriver", "StorageClass",
			"PriorityClass", "VolumeSnapshotClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			// Cluster-scoped: a namespace kustomize stamps on a kind it
			// does not know as such means nothing to the API server.
			delete(md, "namespace")
		}
		o = normalize(o).(map[string]any)
		key := fmt.Sprintf("%s %v", o["kind"], md["name"])
		if ns, ok := md["namespace"]; ok {
			key = fmt.Sprintf("%s %v/%v", o["kind"], ns, md["name"])
		}
		if _, dup := out[key]; dup {
			t.Fatalf("%s twice", key)
		}
		out[key] = o
	}
	return out
}

func TestTheChartWithItsDefaultsIsTheKustomizeDeployment(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	kubectl := tool(t, "KUBECTL", filepath.Join(os.Getenv("HOME"), ".cache/ferry/k8s-v1.37.2/kubectl"))
	chart := objects(t, run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--include-crds", "--set", "namespace.create=true",
		"--set", "peerTLS.source=none")) // deploy/ leaves the peer PKI to the user
	kust := objects(t, append(append(run(t, kubectl, "kustomize", "deploy/crds"), []byte("\n---\n")...), run(t, kubectl, "kustomize", "deploy")...))
	var keys []string
	for k := range kust {
		keys = append(keys, k)
	}
	for k := range chart {
		if _, ok := kust[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		c, inChart := chart[k]
		d, inKust := kust[k]
		switch {
		case !inChart:
			t.Errorf("%s: in deploy/, not made by the chart", k)
		case !inKust:
			t.Errorf("%s: made by the chart, not in deploy/", k)
		case !reflect.DeepEqual(c, d):
			t.Errorf("%s differs (- deploy/, + chart):\n%s", k, diff(t, d, c))
		}
	}
	t.Logf("%d objects compared", len(keys))
}

// Values a user sets reach every place they belong: the pool, the parent
// dataset and the kubelet directory (the daemon's flags and mounts, the
// replica pods' template, the StorageClass), and the node selection.
func TestTheChartsValuesReachEveryPlace(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	out := string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "storage",
		"--set", "zfs.pool=tank", "--set", "zfs.parentDataset=k8s/ferry", "--set", "kubeletDir=/var/lib/k0s/kubelet",
		"--set", "node.nodeSelector.ferry\\.zfs\\.csi\\.io/pool=tank", "--set", "snapshotController.enabled=false",
		"--set", "image.repository=ghcr.io/ferry-csi/ferry", "--set", "image.tag=v0.1.0"))
	for _, want := range []string{
		"--pool=tank", "- --pool=tank\n", "--parent-dataset=k8s/ferry", `pool: "tank"`,
		"--kubelet-dir=/var/lib/k0s/kubelet", "path: /var/lib/k0s/kubelet/pods",
		"ferry.zfs.csi.io/pool: tank", "image: ghcr.io/ferry-csi/ferry:v0.1.0",
		"system:serviceaccount:storage:ferry-node", "namespace: storage",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered with values set, the chart lacks %q", want)
		}
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			lines = append(lines, l) // comments may name the defaults
		}
	}
	objectsOnly := strings.Join(lines, "\n")
	for _, bad := range []string{"--pool=ferry", "/var/lib/kubelet", "ferry-system", "snapshot-controller:v8.7.0", "image: ghcr.io/ferry-csi/ferry:dev"} {
		if strings.Contains(objectsOnly, bad) {
			t.Errorf("rendered with values set, the chart still says %q", bad)
		}
	}
}

// diff is `diff -u` of two objects as YAML.
func diff(t *testing.T, a, b map[string]any) string {
	dir := t.TempDir()
	write := func(name string, o map[string]any) string {
		y, _ := yaml.Marshal(o)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, y, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out, _ := exec.Command("diff", "-u", write("deploy.yaml", a), write("chart.yaml", b)).CombinedOutput()
	return string(out)
}

// normalize collapses the whitespace in every string: kustomize reflows
// folded scalars (the admission policies' CEL) with blank lines Helm does
// not print, a difference no reader of the object sees.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
		return v
	case string:
		return strings.Join(strings.Fields(v), " ")
	}
	return v
}

// By default the chart makes the peer PKI itself: a CA for Ferry's
// signer and a shared certificate it signed, which the peers verify
// (server and client use, DNS name ferry-peer), both kept on uninstall;
// with cert-manager, its Issuers and Certificates instead; a source it
// does not know is refused.
func TestTheChartMakesThePeerPKI(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	objs := objects(t, run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system"))
	data := func(name string) map[string][]byte {
		t.Helper()
		o, ok := objs["Secret ferry-system/"+name]
		if !ok {
			t.Fatalf("no Secret %s by default", name)
		}
		if ann, _ := o["metadata"].(map[string]any)["annotations"].(map[string]any); ann != nil {
			t.Errorf("Secret %s: annotations %v left after the release's own are removed", name, ann)
		}
		out := map[string][]byte{}
		for k, v := range o["data"].(map[string]any) {
			b, err := base64.StdEncoding.DecodeString(v.(string))
			if err != nil {
				t.Fatalf("Secret %s %s: %v", name, k, err)
			}
			out[k] = b
		}
		return out
	}
	ca, peer := data("ferry-peer-ca"), data("ferry-peer-tls")
	if _, err := tls.X509KeyPair(ca["tls.crt"], ca["tls.key"]); err != nil {
		t.Errorf("ferry-peer-ca: the key is not the certificate's: %v", err)
	}
	if string(peer["ca.crt"]) != string(ca["tls.crt"]) {
		t.Error("ferry-peer-tls's ca.crt is not ferry-peer-ca's certificate")
	}
	pair, err := tls.X509KeyPair(peer["tls.crt"], peer["tls.key"])
	if err != nil {
		t.Fatalf("ferry-peer-tls: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	roots := x509.NewCertPool()
	block, _ := pem.Decode(ca["tls.crt"])
	caCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !caCert.IsCA {
		t.Fatalf("ferry-peer-ca is not a CA certificate: %v", err)
	}
	roots.AddCert(caCert)
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "ferry-peer", KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			t.Errorf("the shared certificate does not verify for %v as ferry-peer: %v", use, err)
		}
	}
	out := string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "-s", "templates/peer-tls.yaml"))
	if strings.Count(out, "helm.sh/resource-policy: keep") != 2 {
		t.Error("the peer PKI's Secrets are not kept on uninstall (a reinstall would make a new CA)")
	}

	cm := objects(t, run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--set", "peerTLS.source=cert-manager"))
	for _, k := range []string{"Issuer ferry-system/ferry-peer-selfsigned", "Certificate ferry-system/ferry-peer-ca", "Issuer ferry-system/ferry-peer", "Certificate ferry-system/ferry-peer-tls"} {
		if _, ok := cm[k]; !ok {
			t.Errorf("with cert-manager, no %s", k)
		}
	}
	if _, ok := cm["Secret ferry-system/ferry-peer-ca"]; ok {
		t.Error("with cert-manager, the chart still makes the CA itself")
	}
	cmd := exec.Command(helm, "template", "ferry", "deploy/helm/ferry", "--set", "peerTLS.source=vault")
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "peerTLS.source must be") {
		t.Errorf("an unknown peerTLS.source: %v\n%s", err, b)
	}
}

// Ferry's pods run the host's own zfs and zpool below /host (README,
// "Images"): the daemon's and the replica pods' containers mount there
// each host directory the tools need, read-only, from the host directory
// of the same name, the datasets' directory Bidirectional (OpenZFS mounts
// there), and never the host's whole /; the daemon names the root in
// FERRY_HOST_ROOT, which it hands to its volume managers.
func TestFerrysPodsMountTheHostsToolsAndNotItsWholeRoot(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	var ds, cm map[string]any // as rendered (objects() folds the template's lines)
	for _, doc := range strings.Split(string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system")), "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		name, _ := o["metadata"].(map[string]any)["name"].(string)
		switch {
		case o["kind"] == "DaemonSet" && name == "ferry-node":
			ds = o
		case o["kind"] == "ConfigMap" && name == "ferry-replica-template":
			cm = o
		}
	}
	if ds == nil || cm == nil {
		t.Fatal("the chart makes no DaemonSet ferry-node or ConfigMap ferry-replica-template")
	}
	pod := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	var daemon map[string]any
	for _, c := range pod["containers"].([]any) {
		if c.(map[string]any)["name"] == "ferry" {
			daemon = c.(map[string]any)
		}
	}
	env := map[string]any{}
	for _, e := range daemon["env"].([]any) {
		env[e.(map[string]any)["name"].(string)] = e.(map[string]any)["value"]
	}
	if env["FERRY_HOST_ROOT"] != "/host" {
		t.Errorf("the daemon's FERRY_HOST_ROOT is %v, want /host", env["FERRY_HOST_ROOT"])
	}
	var replica map[string]any
	if err := yaml.Unmarshal([]byte(cm["data"].(map[string]any)["template.yaml"].(string)), &replica); err != nil {
		t.Fatal(err)
	}
	for who, spec := range map[string][2]any{
		"the daemon":       {pod["volumes"], daemon["volumeMounts"]},
		"the replica pods": {replica["volumes"], replica["volumeMounts"]},
	} {
		hostPaths := map[string]string{}
		for _, v := range spec[0].([]any) {
			v := v.(map[string]any)
			if hp, ok := v["hostPath"].(map[string]any); ok {
				hostPaths[v["name"].(string)] = hp["path"].(string)
				if hp["path"] == "/" {
					t.Errorf("%s mount the host's whole /", who)
				}
			}
		}
		below := map[string]map[string]any{}
		for _, m := range spec[1].([]any) {
			m := m.(map[string]any)
			if p := m["mountPath"].(string); strings.HasPrefix(p, "/host/") {
				below[strings.TrimPrefix(p, "/host")] = m
			}
		}
		for _, dir := range []string{"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/proc", "/sys", "/dev", "/var/run/zfs", "/var/lib/ferry"} {
			m := below[dir]
			switch {
			case m == nil:
				t.Errorf("%s mount nothing at /host%s", who, dir)
				continue
			case hostPaths[m["name"].(string)] != dir:
				t.Errorf("%s mount host path %q at /host%s", who, hostPaths[m["name"].(string)], dir)
			}
			ro, _ := m["readOnly"].(bool)
			switch dir {
			case "/var/lib/ferry":
				if m["mountPropagation"] != "Bidirectional" || ro {
					t.Errorf("%s mount the datasets' directory at /host%s %v, want it writable and Bidirectional", who, dir, m)
				}
			case "/dev", "/var/run/zfs":
			case "/proc": // zfs-fuse's rollback writes /proc/sys/vm/drop_caches
				if m["mountPropagation"] != nil {
					t.Errorf("%s mount /host%s %v, want it without propagation", who, dir, m)
				}
			default:
				if !ro || m["mountPropagation"] != nil {
					t.Errorf("%s mount /host%s %v, want it read-only, without propagation", who, dir, m)
				}
			}
			delete(below, dir)
		}
		for dir := range below {
			t.Errorf("%s mount /host%s too", who, dir)
		}
	}
}

// With monitoring.prometheusRule.enabled, the chart makes a PrometheusRule
// whose spec is the rule file promtool checks (alerts/ferry.rules.yaml),
// with the labels asked for; by default it makes none.
func TestThePrometheusRuleIsTheCheckedRuleFile(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	if out := string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system")); strings.Contains(out, "kind: PrometheusRule") {
		t.Error("the chart makes a PrometheusRule by default (its CRD may be missing)")
	}
	out := run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--show-only", "templates/prometheusrule.yaml",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.labels.release=prom")
	var rule map[string]any
	if err := yaml.Unmarshal(out, &rule); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../../deploy/helm/ferry/alerts/ferry.rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(file, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rule["spec"], want) {
		t.Errorf("the PrometheusRule's spec is not the rule file:\n%s", diff(t, want, rule["spec"].(map[string]any)))
	}
	if l := rule["metadata"].(map[string]any)["labels"].(map[string]any); l["release"] != "prom" {
		t.Errorf("the PrometheusRule's labels are %v, want release=prom among them", l)
	}
}

// The dashboard's ConfigMap carries the dashboard file as it is, with the
// label Grafana's sidecar looks for; the PodMonitor keeps only pods that
// say they serve metrics. Neither is made by default (their consumers may
// be missing).
func TestTheDashboardAndPodMonitorAreOptIn(t *testing.T) {
	helm := tool(t, "HELM", filepath.Join(os.Getenv("HOME"), ".cache/ferry/tools/helm-v4.3.1/helm"))
	if out := string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system")); strings.Contains(out, "kind: PodMonitor") || strings.Contains(out, "ferry-grafana-dashboard") {
		t.Error("the chart makes a PodMonitor or the dashboard's ConfigMap by default")
	}
	out := run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--show-only", "templates/grafana-dashboard.yaml",
		"--set", "monitoring.grafanaDashboard.enabled=true", "--set", "monitoring.grafanaDashboard.namespace=monitoring")
	var cm struct {
		Metadata struct {
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(out, &cm); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile("../../deploy/helm/ferry/dashboards/ferry.json")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["ferry.json"] != strings.TrimRight(string(file), "\n") {
		t.Error("the ConfigMap's ferry.json is not dashboards/ferry.json")
	}
	if cm.Metadata.Namespace != "monitoring" || cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard's ConfigMap: namespace %q, labels %v", cm.Metadata.Namespace, cm.Metadata.Labels)
	}
	pm := string(run(t, helm, "template", "ferry", "deploy/helm/ferry", "--namespace", "ferry-system", "--show-only", "templates/podmonitor.yaml",
		"--set", "monitoring.podMonitor.enabled=true"))
	for _, want := range []string{"kind: PodMonitor", "__meta_kubernetes_pod_annotation_prometheus_io_scrape", "__meta_kubernetes_pod_annotation_prometheus_io_port", "action: keep",
		// once per pod: Ferry's container, its metrics port
		`regex: "ferry|volume-manager"`, `regex: "(metrics)?"`} {
		if !strings.Contains(pm, want) {
			t.Errorf("the PodMonitor lacks %q:\n%s", want, pm)
		}
	}
}
