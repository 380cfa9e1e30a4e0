//go:build apiserver

package kubeapi_test

import (
	"context"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ferry-csi/ferry/adapters/kube/lostnode"
	"github.com/ferry-csi/ferry/adapters/kube/nodelabels"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
)

// The admission policy of deploy/admission-node-labels.yaml, on the real
// API server: the daemon's ServiceAccount may set and remove Ferry's
// placement labels on a node and change nothing else; anyone else is not
// concerned by it.
func TestTheNodeDaemonMayChangeOnlyFerrysPlacementLabels(t *testing.T) {
	cfg := start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	installPolicy(t, admin)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a",
		Labels: map[string]string{"kubernetes.io/hostname": "node-a", "replica.ferry.zfs.csi.io/pvc-old": "ready"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	daemonCfg := rest.CopyConfig(cfg)
	daemonCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ferry-system:ferry-node"}
	daemon := kubernetes.NewForConfigOrDie(daemonCfg)
	patch := func(c kubernetes.Interface, p string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	// Policies take effect shortly after they are created: wait until the
	// first refusal, then check every case.
	deadline := time.Now().Add(time.Minute)
	for {
		err := patch(daemon, `{"metadata":{"labels":{"team":"x"}}}`)
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			break
		}
		if err == nil {
			_ = patch(admin, `{"metadata":{"labels":{"team":null}}}`)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never refused the daemon another label: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	allowed := []struct{ what, patch string }{
		{"set a placement label", `{"metadata":{"labels":{"replica.ferry.zfs.csi.io/pvc-1":"ready"}}}`},
		{"remove a placement label", `{"metadata":{"labels":{"replica.ferry.zfs.csi.io/pvc-old":null}}}`},
	}
	for _, a := range allowed {
		if err := patch(daemon, a.patch); err != nil {
			t.Errorf("%s: refused: %v", a.what, err)
		}
	}
	refused := []struct{ what, patch, says string }{
		{"add another label", `{"metadata":{"labels":{"team":"x"}}}`, "only labels under replica.ferry.zfs.csi.io/"},
		{"change another label", `{"metadata":{"labels":{"kubernetes.io/hostname":"node-b"}}}`, "only labels under"},
		{"remove another label", `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`, "only labels under"},
		{"a placement label with another value", `{"metadata":{"labels":{"replica.ferry.zfs.csi.io/pvc-2":"yes"}}}`, `the value "ready"`},
		{"cordon", `{"spec":{"unschedulable":true}}`, "may not change a node's spec"},
		{"taint", `{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`, "may not change a node's spec"},
		{"taint besides the fenced one", `{"spec":{"taints":[{"key":"ferry.zfs.csi.io/fenced","effect":"NoSchedule"},{"key":"k","effect":"NoSchedule"}]}}`, "may not change a node's spec"},
		{"a provider ID", `{"spec":{"providerID":"x://y"}}`, "may not change a node's spec"},
		{"annotate", `{"metadata":{"annotations":{"a":"b"}}}`, "annotations"},
	}
	for _, r := range refused {
		err := patch(daemon, r.patch)
		if err == nil || !strings.Contains(err.Error(), r.says) {
			t.Errorf("%s: got %v, want a refusal saying %q", r.what, err, r.says)
		}
	}
	// The fenced taint, as the daemon's lostnode adapter sets and lifts
	// it: the other taints (the API server's not-ready one) stay.
	effects := lostnode.New(daemon, "ferry.zfs.csi.io", "")
	if err := effects.Taint(ctx, "node-a", true); err != nil {
		t.Errorf("taint the node fenced: %v", err)
	}
	if on, err := effects.Tainted(ctx, "node-a"); !on || err != nil {
		t.Errorf("the fenced taint is not there: %v %v", on, err)
	}
	if err := effects.Taint(ctx, "node-a", false); err != nil {
		t.Errorf("lift the fenced taint: %v", err)
	}
	_, err := daemon.CoreV1().Nodes().Patch(ctx, "node-a", types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/taints/-","value":{"key":"ferry.zfs.csi.io/fenced","effect":"NoExecute"}}]`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "effect NoSchedule") {
		t.Errorf("the fenced taint evicting: got %v, want a refusal saying %q", err, "effect NoSchedule")
	}
	_, err = daemon.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"status":{"capacity":{"cpu":"64"}}}`), metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), "status") {
		t.Errorf("status patch: got %v, want a refusal", err)
	}
	// Others are not concerned: an administrator may still label the node.
	if err := patch(admin, `{"metadata":{"labels":{"team":"x"}}}`); err != nil {
		t.Errorf("an administrator's label was refused: %v", err)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["replica.ferry.zfs.csi.io/pvc-1"] != "ready" || node.Labels["kubernetes.io/hostname"] != "node-a" || node.Spec.Unschedulable {
		t.Errorf("node after the patches: labels %v, unschedulable %v", node.Labels, node.Spec.Unschedulable)
	}
}

var policyOnce sync.Once

// installPolicy creates deploy's admission policy once for the package.
func installPolicy(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	policyOnce.Do(func() { createPolicy(t, c, "../../deploy/admission-node-labels.yaml") })
}

func createPolicy(t *testing.T, c kubernetes.Interface, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(context.Background(), &p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case "ValidatingAdmissionPolicyBinding":
			var p admissionv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			if _, err := c.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(), &p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s document %d: unexpected kind %q", file, i, meta.Kind)
		}
	}
}

// The daemon's labels, written by the nodelabels adapter as the daemon's
// ServiceAccount, pass the admission policy and touch nothing else.
func TestThePlacerLabelsItsNodeThroughThePolicy(t *testing.T) {
	cfg := start(t)
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	installPolicy(t, admin)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-p",
		Labels: map[string]string{"kubernetes.io/hostname": "node-p", "replica.ferry.zfs.csi.io/pvc-stale": "ready", "replica.ferry.zfs.csi.io/pvc-flaky": "ready"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	daemonCfg := rest.CopyConfig(cfg)
	daemonCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ferry-system:ferry-node"}
	p := nodelabels.New(kubernetes.NewForConfigOrDie(daemonCfg))
	if err := p.Place(ctx, "node-p", []volume.ID{"pvc-1", "Vol_Hashed"}, []volume.ID{"pvc-flaky"}); err != nil {
		t.Fatal(err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, "node-p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"kubernetes.io/hostname": "node-p", "replica.ferry.zfs.csi.io/pvc-1": "ready",
		rvapi.UsableLabel("Vol_Hashed"): "ready", "replica.ferry.zfs.csi.io/pvc-flaky": "ready"}
	if !maps.Equal(n.Labels, want) {
		t.Fatalf("labels %v, want %v", n.Labels, want)
	}
}
