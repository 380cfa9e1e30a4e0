//go:build apiserver

package kubeapi_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/adapters/kube/workload"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
)

// The rendered ReplicaSet and budget pass the real API server's
// validation, are owned by the ReplicatedVolume and follow its scale.
func TestTheReplicaWorkloadIsValidAndFollowsThePlacement(t *testing.T) {
	cfg := start(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	st := replica.State{Volume: "pvc-w", ReplicationFactor: 3, Epoch: 1}
	if _, err := rvstate.New(dyn, nil).Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(rvapi.GVR).Get(ctx, "pvc-w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := workload.Owner{Volume: "pvc-w", Name: u.GetName(), UID: u.GetUID()}
	a := workload.New(kube, dyn, workload.Template{Namespace: "ferry-system", Image: "ferry:dev", ServiceAccount: "ferry-replica",
		Args: []string{"--pool=ferry-$(NODE_NAME)"}})
	if err := a.Ensure(ctx, owner, placement.Desired(st), "30s"); err != nil {
		t.Fatal(err)
	}
	rs, err := kube.AppsV1().ReplicaSets("ferry-system").Get(ctx, workload.Name("pvc-w"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb, err := kube.PolicyV1().PodDisruptionBudgets("ferry-system").Get(ctx, workload.Name("pvc-w"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *rs.Spec.Replicas != 3 || pdb.Spec.MinAvailable.IntValue() != 2 || rs.OwnerReferences[0].UID != u.GetUID() {
		t.Fatalf("replicas %d, minAvailable %v, owner %+v", *rs.Spec.Replicas, pdb.Spec.MinAvailable, rs.OwnerReferences)
	}
	// A primary became active: it left the ReplicaSet.
	st.Replicas = []replica.Replica{{Node: "a", Active: true}, {Node: "b"}, {Node: "c"}}
	st.Primary = "a"
	if err := a.Ensure(ctx, owner, placement.Desired(st), "30s"); err != nil {
		t.Fatal(err)
	}
	rs, _ = kube.AppsV1().ReplicaSets("ferry-system").Get(ctx, workload.Name("pvc-w"), metav1.GetOptions{})
	pdb, _ = kube.PolicyV1().PodDisruptionBudgets("ferry-system").Get(ctx, workload.Name("pvc-w"), metav1.GetOptions{})
	if *rs.Spec.Replicas != 2 || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Fatalf("after activation: replicas %d, minAvailable %v", *rs.Spec.Replicas, pdb.Spec.MinAvailable)
	}
}

// A publish moves the node's replica pod out of the ReplicaSet in one
// write: the component label, the ReplicatedVolume as its one controller
// (kubectl drain evicts only pods that name one) and the ReplicaSet's
// controller reference gone; the primaries' budget exists. Unpublish moves
// it back: the volume a plain owner again, for the ReplicaSet to adopt.
func TestAReplicaPodLeavesTheReplicaSetForAPublishAndComesBack(t *testing.T) {
	cfg := start(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	st := replica.State{Volume: "pvc-out", ReplicationFactor: 2, Epoch: 1}
	if _, err := rvstate.New(dyn, nil).Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(rvapi.GVR).Get(ctx, "pvc-out", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := workload.Owner{Volume: "pvc-out", Name: u.GetName(), UID: u.GetUID()}
	a := workload.New(kube, dyn, workload.Template{Namespace: "ferry-system", Image: "ferry:dev", ServiceAccount: "ferry-replica"})
	if err := a.Ensure(ctx, owner, placement.Desired(st), "30s"); err != nil {
		t.Fatal(err)
	}
	rs, err := kube.AppsV1().ReplicaSets("ferry-system").Get(ctx, workload.Name("pvc-out"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod as the ReplicaSet made it (no controller manager runs here).
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rs-made", Namespace: "ferry-system", Labels: rs.Spec.Template.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: *rs.Spec.Template.Spec.DeepCopy()}
	pod.Spec.NodeName = "node-b"
	if _, err := kube.CoreV1().ServiceAccounts("ferry-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ferry-replica"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Pods("ferry-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetOutside(ctx, "pvc-out", "node-b", true); err != nil {
		t.Fatal(err)
	}
	got, err := kube.CoreV1().Pods("ferry-system").Get(ctx, "rs-made", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctrl := metav1.GetControllerOf(got)
	if got.Labels["app.kubernetes.io/component"] != workload.ComponentPrimary || ctrl == nil || ctrl.UID != u.GetUID() || len(got.OwnerReferences) != 1 {
		t.Fatalf("after leaving: labels %v, owners %+v", got.Labels, got.OwnerReferences)
	}
	ws, err := a.Status(ctx, "pvc-out", "node-b")
	if err != nil || ws.Outside != 1 || ws.Running != 0 {
		t.Fatalf("status after leaving: %+v %v", ws, err)
	}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("ferry-system").Get(ctx, workload.Name("pvc-out")+"-primary", metav1.GetOptions{}); err != nil {
		t.Fatalf("the primaries' budget: %v", err)
	}
	if err := a.SetOutside(ctx, "pvc-out", "node-b", false); err != nil {
		t.Fatal(err)
	}
	got, _ = kube.CoreV1().Pods("ferry-system").Get(ctx, "rs-made", metav1.GetOptions{})
	if got.Labels["app.kubernetes.io/component"] != workload.ComponentReplica || metav1.GetControllerOf(got) != nil || len(got.OwnerReferences) != 1 {
		t.Fatalf("after coming back: labels %v, owners %+v", got.Labels, got.OwnerReferences)
	}
	if err := a.SetOutside(ctx, "pvc-out", "node-c", true); err == nil {
		t.Fatal("a node without a pod of the volume: no error")
	}
}
