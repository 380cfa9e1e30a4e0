package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func certPEM(t *testing.T, cn string, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func daemonMetrics(version string, size, avail float64, up int) string {
	return `# HELP ferry_build_info 1
ferry_build_info{mode="daemon",version="` + version + `"} 1
ferry_pool_up{node="n",pool="tank"} ` + strings.TrimSpace(strings.Repeat("1", up)+strings.Repeat("0", 1-up)) + `
ferry_pool_size_bytes{node="n",pool="tank"} ` + ftoa(size) + `
ferry_pool_available_bytes{node="n",pool="tank"} ` + ftoa(avail) + `
`
}

func ftoa(f float64) string { return big.NewFloat(f).Text('g', 10) }

// A healthy installation, which each case then breaks in one place.
type fixture struct {
	objects  []runtime.Object
	dynamics []runtime.Object
	metrics  map[string]string // by node
}

func healthy(t *testing.T) *fixture {
	f := &fixture{metrics: map[string]string{
		"node1": daemonMetrics("v0.3.0", 1000, 600, 1),
		"node2": daemonMetrics("v0.3.0", 1000, 500, 1),
	}}
	f.objects = append(f.objects, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName}})
	for _, n := range admissionPolicies {
		f.objects = append(f.objects,
			&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: n}},
			&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "node"}}
	f.objects = append(f.objects, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: daemonSet, Namespace: "ferry-system"},
		Spec:   appsv1.DaemonSetSpec{Selector: sel},
		Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 2, UpdatedNumberScheduled: 2}})
	for _, n := range []string{"node1", "node2"} {
		f.objects = append(f.objects, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "ferry-node-" + n, Namespace: "ferry-system", Labels: sel.MatchLabels,
				Annotations: map[string]string{"prometheus.io/port": "9808"}},
			Spec: corev1.PodSpec{NodeName: n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	f.objects = append(f.objects,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peerCASecret, Namespace: "ferry-system"},
			Data: map[string][]byte{"tls.crt": certPEM(t, "ferry-peer-ca", now.Add(3650*24*time.Hour))}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peerSecret, Namespace: "ferry-system"},
			Data: map[string][]byte{"tls.crt": certPEM(t, "ferry-peer", now.Add(365*24*time.Hour))}})
	f.dynamics = append(f.dynamics,
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": rvapi.Resource + "." + rvapi.Group},
			"status":   map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}}},
		}},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": rvapi.APIVersion, "kind": rvapi.Kind,
			"metadata": map[string]any{"name": "pvc-a"}, "status": map[string]any{"phase": "Available"},
		}})
	return f
}

func (f *fixture) run(t *testing.T) ([]finding, string, bool) {
	t.Helper()
	scheme := runtime.NewScheme()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		rvapi.GVR: rvapi.Kind + "List", crdGVR: "CustomResourceDefinitionList"}, f.dynamics...)
	kube := kubefake.NewClientset(f.objects...)
	env := doctorEnv{kube: kube, dyn: dyn, ns: "ferry-system", now: now, version: "v0.3.0",
		scrape: func(_ context.Context, p corev1.Pod, port string) (string, error) {
			if port != "9808" {
				return "", errors.New("wrong port " + port)
			}
			m, ok := f.metrics[p.Spec.NodeName]
			if !ok {
				return "", errors.New("connection refused")
			}
			return m, nil
		}}
	fs := doctor(context.Background(), env)
	var out bytes.Buffer
	healthy := writeDoctor(&out, fs)
	return fs, out.String(), healthy
}

func verdictOf(fs []finding, check string) (finding, bool) {
	for _, f := range fs {
		if f.Check == check {
			return f, true
		}
	}
	return finding{}, false
}

func TestDoctorFindsAHealthyInstallationHealthy(t *testing.T) {
	fs, out, ok := healthy(t).run(t)
	if !ok || !strings.Contains(out, "Ferry is healthy.") {
		t.Fatalf("a healthy installation reported unhealthy:\n%s", out)
	}
	for _, want := range []string{"crd", "csidriver", "admission", "daemons", "pool node1", "pool node2", "versions",
		"certificate " + peerCASecret, "certificate " + peerSecret, "volumes"} {
		f, found := verdictOf(fs, want)
		if !found || f.V != pass {
			t.Errorf("check %q: %+v (found %v), want OK", want, f, found)
		}
	}
	if f, _ := verdictOf(fs, "pool node2"); !strings.Contains(f.Detail, "500 B free of 1000 B (50%)") {
		t.Errorf("pool node2: %q", f.Detail)
	}
}

func TestDoctorReportsWhatIsBroken(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(*fixture)
		check   string
		v       verdict
		detail  string
	}{
		{"a policy deleted", func(f *fixture) {
			f.objects = dropObject(f.objects, "ferry-node-labels", "ValidatingAdmissionPolicyBinding")
		}, "admission", fail, "binding ferry-node-labels (not found)"},
		{"no CSIDriver", func(f *fixture) { f.objects = dropObject(f.objects, driverName, "CSIDriver") }, "csidriver", fail, "not found"},
		{"a pool nearly full", func(f *fixture) { f.metrics["node2"] = daemonMetrics("v0.3.0", 1000, 50, 1) }, "pool node2", warn, "nearly full"},
		{"a pool unreadable", func(f *fixture) { f.metrics["node1"] = daemonMetrics("v0.3.0", 0, 0, 0) }, "pool node1", fail, "could not be read"},
		{"a daemon unreachable", func(f *fixture) { delete(f.metrics, "node1") }, "pool node1", warn, "connection refused"},
		{"two versions", func(f *fixture) { f.metrics["node2"] = daemonMetrics("v0.2.0", 1000, 500, 1) }, "versions", warn, "v0.2.0 on node2; v0.3.0 on node1"},
		{"a certificate expiring", func(f *fixture) {
			replaceSecret(f, peerSecret, certPEM(t, "ferry-peer", now.Add(10*24*time.Hour)))
		}, "certificate " + peerSecret, warn, "in 10 days"},
		{"a certificate expired", func(f *fixture) {
			replaceSecret(f, peerCASecret, certPEM(t, "ferry-peer-ca", now.Add(-time.Hour)))
		}, "certificate " + peerCASecret, fail, "expired"},
		{"a degraded volume", func(f *fixture) {
			f.dynamics = append(f.dynamics, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": rvapi.APIVersion, "kind": rvapi.Kind,
				"metadata": map[string]any{"name": "pvc-b"}, "status": map[string]any{"phase": "Degraded"},
			}})
		}, "volumes", warn, "not available: pvc-b (Degraded)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := healthy(t)
			c.breakIt(f)
			fs, out, healthy := f.run(t)
			got, found := verdictOf(fs, c.check)
			if !found || got.V != c.v || !strings.Contains(got.Detail, c.detail) {
				t.Errorf("check %q: %+v (found %v); want %v with %q\n%s", c.check, got, found, c.v, c.detail, out)
			}
			if healthy != (c.v != fail) {
				t.Errorf("healthy = %v with a %v finding", healthy, c.v)
			}
		})
	}
}

func dropObject(objs []runtime.Object, name, kind string) []runtime.Object {
	var out []runtime.Object
	for _, o := range objs {
		m, _ := o.(metav1.Object)
		if m.GetName() == name && strings.HasSuffix(strings.TrimPrefix(typeName(o), "*"), kind) {
			continue
		}
		out = append(out, o)
	}
	return out
}

func typeName(o runtime.Object) string {
	switch o.(type) {
	case *admissionv1.ValidatingAdmissionPolicy:
		return "ValidatingAdmissionPolicy"
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		return "ValidatingAdmissionPolicyBinding"
	case *storagev1.CSIDriver:
		return "CSIDriver"
	}
	return ""
}

func replaceSecret(f *fixture, name string, crt []byte) {
	for _, o := range f.objects {
		if s, ok := o.(*corev1.Secret); ok && s.Name == name {
			s.Data["tls.crt"] = crt
		}
	}
}

func TestMetricsAreParsedWithTheirLabels(t *testing.T) {
	m := parseMetrics("# HELP x\nferry_build_info{mode=\"daemon\",version=\"v1 \\\"q\\\"\"} 1\nferry_pool_up 0\nbroken{\n")
	if s := m["ferry_build_info"]; len(s) != 1 || s[0].labels["version"] != `v1 "q"` || s[0].labels["mode"] != "daemon" || s[0].value != 1 {
		t.Errorf("build info %+v", s)
	}
	if v, ok := first(m, "ferry_pool_up"); !ok || v != 0 {
		t.Errorf("pool up %v %v", v, ok)
	}
	if len(m) != 2 {
		t.Errorf("%d metrics, want 2 (a malformed line skipped): %v", len(m), m)
	}
}
