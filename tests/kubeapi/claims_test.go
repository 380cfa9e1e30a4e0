//go:build apiserver

package kubeapi_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/claims"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// The claims adapter on a real API server: only Ferry's Immediate claims
// without a node, volume or data source are pending; only schedulable,
// Ready nodes running Ferry are candidates; a selection is written once.
func TestImmediateClaimsPendingCandidatesAndOneSelection(t *testing.T) {
	cfg := start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	immediate, wffc := storagev1.VolumeBindingImmediate, storagev1.VolumeBindingWaitForFirstConsumer
	for _, sc := range []storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "claims-now"}, Provisioner: "ferry.zfs.csi.io", VolumeBindingMode: &immediate},
		{ObjectMeta: metav1.ObjectMeta{Name: "claims-later"}, Provisioner: "ferry.zfs.csi.io", VolumeBindingMode: &wffc},
		{ObjectMeta: metav1.ObjectMeta{Name: "claims-other"}, Provisioner: "other.csi.io", VolumeBindingMode: &immediate},
	} {
		if _, err := kube.StorageV1().StorageClasses().Create(ctx, &sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node := func(name string, ferry, ready, cordoned bool) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
		if ferry {
			n.Labels["topology.ferry.zfs.csi.io/node"] = name
		}
		n, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	node("claims-n1", true, true, false)
	node("claims-n2", true, false, false) // not Ready
	node("claims-n3", true, true, true)   // cordoned
	node("claims-n4", false, true, false) // no Ferry
	ns := "claims-test"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := func(name, class string, mutate func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}
		if mutate != nil {
			mutate(c)
		}
		c, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Status.Phase = corev1.ClaimPending // the PV controller's part; none runs here
		if c, err = kube.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := claim("now", "claims-now", nil)
	claim("later", "claims-later", nil)
	claim("other", "claims-other", nil)
	claim("placed", "claims-now", func(c *corev1.PersistentVolumeClaim) {
		c.Annotations = map[string]string{claims.SelectedNode: "claims-n1"}
	})
	claim("restore", "claims-now", func(c *corev1.PersistentVolumeClaim) {
		c.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: strPtr("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "s"}
	})

	cl, err := claims.Start(ctx, kube, "ferry.zfs.csi.io", "topology.ferry.zfs.csi.io/node")
	if err != nil {
		t.Fatal(err)
	}
	pending, err := cl.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].Name != "now" || pending[0].UID != string(want.UID) {
		t.Fatalf("pending %+v, want only claim \"now\"", pending)
	}
	nodes, err := cl.Candidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0] != "claims-n1" {
		t.Fatalf("candidates %v, want only claims-n1 (running Ferry, Ready, schedulable)", nodes)
	}
	if err := cl.Select(ctx, pending[0], "claims-n1"); err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "now", metav1.GetOptions{})
	if err != nil || got.Annotations[claims.SelectedNode] != "claims-n1" {
		t.Fatalf("claim after Select: %v, %v", got.Annotations, err)
	}
	// A second daemon's selection, from its older view, loses.
	if err := cl.Select(ctx, pending[0], replica.Node("claims-n3")); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("a second selection: %v, want ErrConflict", err)
	}
	// A claim deleted and made again under the same name is another claim.
	stale := ports.PendingClaim{Namespace: ns, Name: "now", UID: "another-uid"}
	if err := cl.Select(ctx, stale, "claims-n1"); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("a selection for a replaced claim: %v, want ErrConflict", err)
	}
}

func strPtr(s string) *string { return &s }
