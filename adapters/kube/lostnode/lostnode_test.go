package lostnode

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
)

func pod(name, node, claim string, owned bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
	if owned {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "ss", Controller: &yes}}
	}
	return p
}

func TestOnlyTheLostNodesOwnedPodsOfTheVolumeAreForceDeleted(t *testing.T) {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ferry.zfs.csi.io", VolumeHandle: "pvc-1"}},
		ClaimRef:               &corev1.ObjectReference{Namespace: "app", Name: "data-db-0"}}}
	client := fake.NewClientset(pv,
		pod("db-0", "node1", "data-db-0", true),       // deleted
		pod("bare", "node1", "data-db-0", false),      // nobody recreates it: left
		pod("other", "node1", "another", true),        // another claim
		pod("db-0-moved", "node2", "data-db-0", true), // another node
	)
	e := New(client, "ferry.zfs.csi.io", "ferry-system")
	got, err := e.EvictPods(context.Background(), "node1", "pvc-1")
	if err != nil || !slices.Equal(got, []string{"app/db-0"}) {
		t.Fatalf("evicted %v, %v; want [app/db-0]", got, err)
	}
	left, _ := client.CoreV1().Pods("app").List(context.Background(), metav1.ListOptions{})
	if len(left.Items) != 3 {
		t.Fatalf("%d pods left, want 3", len(left.Items))
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			d := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions()
			if d.GracePeriodSeconds == nil || *d.GracePeriodSeconds != 0 || d.Preconditions == nil || d.Preconditions.UID == nil || *d.Preconditions.UID != "uid-db-0" {
				t.Fatalf("delete options %+v: want grace 0 and the pod's UID as precondition", d)
			}
		}
	}
	// Another driver's volume of that handle is not ours: nothing deleted.
	if got, err := New(client, "other.csi", "ferry-system").EvictPods(context.Background(), "node1", "pvc-1"); err != nil || len(got) != 0 {
		t.Fatalf("another driver: %v, %v", got, err)
	}
}

func replicaPod(name, node string, id volume.ID, component string, owner metav1.OwnerReference) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry-system", UID: types.UID("uid-" + name),
		Labels:          map[string]string{"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": component, rvapi.LabelVolume: rvapi.Hash(id)},
		OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{NodeName: node}}
}

// The lost node's replica pod of the volume outside its ReplicaSet (the
// primary's, whose term was taken over) goes; the ReplicaSet's own pod
// there stays (a node judged lost by its lease alone must not cost every
// volume a full copy elsewhere), as do those of another node or another
// volume, and the volume's pod in another namespace (no replica pod of
// Ferry's).
func TestTheLostNodesPrimaryReplicaPodOfTheVolumeIsForceDeletedTheReplicaSetsStay(t *testing.T) {
	yes := true
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ferry-pvc-1", UID: "rs", Controller: &yes}
	rv := metav1.OwnerReference{APIVersion: "ferry.zfs.csi.io/v1alpha1", Kind: "ReplicatedVolume", Name: "pvc-1", UID: "rv", Controller: &yes}
	elsewhere := replicaPod("in-app", "node1", "pvc-1", "replica", rs)
	elsewhere.Namespace = "app"
	client := fake.NewClientset(
		replicaPod("ferry-pvc-1-abcde", "node1", "pvc-1", "replica", rs),    // the ReplicaSet's: stays
		replicaPod("ferry-pvc-1-1a2b3c4d", "node1", "pvc-1", "primary", rv), // deleted
		replicaPod("ferry-pvc-1-fghij", "node2", "pvc-1", "replica", rs),    // another node
		replicaPod("ferry-pvc-2-abcde", "node1", "pvc-2", "replica", rs),    // another volume
		elsewhere,
	)
	ctx := context.Background()
	got, err := New(client, "ferry.zfs.csi.io", "ferry-system").RemoveReplicaPods(ctx, "node1", "pvc-1")
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"ferry-system/ferry-pvc-1-1a2b3c4d"}) {
		t.Fatalf("removed %v, %v; want node1's primary replica pod of pvc-1", got, err)
	}
	left, _ := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if len(left.Items) != 4 {
		t.Fatalf("%d pods left, want 4", len(left.Items))
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "delete" {
			d := a.(interface{ GetDeleteOptions() metav1.DeleteOptions }).GetDeleteOptions()
			if d.GracePeriodSeconds == nil || *d.GracePeriodSeconds != 0 || d.Preconditions == nil || d.Preconditions.UID == nil {
				t.Fatalf("delete options %+v: want grace 0 and the pod's UID as precondition", d)
			}
		}
	}
	// Without replication (no replica namespace) nothing is listed.
	if got, err := New(client, "ferry.zfs.csi.io", "").RemoveReplicaPods(ctx, "node2", "pvc-1"); err != nil || len(got) != 0 {
		t.Fatalf("without replica pods: %v, %v", got, err)
	}
}

func TestTheTaintIsSetAndLiftedKeepingOtherTaintsAndThePlacementLabelGoes(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", ResourceVersion: "1", Labels: map[string]string{"replica.ferry.zfs.csi.io/pvc-1": "ready", "keep": "x"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoExecute}}}}
	fenced := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: FencedNodes, Namespace: "ferry-system"}, Data: map[string]string{"node2": "fenced"}}
	client := fake.NewClientset(node, fenced)
	e := New(client, "ferry.zfs.csi.io", "ferry-system")
	ctx := context.Background()
	listed := func() map[string]string {
		cm, err := client.CoreV1().ConfigMaps("ferry-system").Get(ctx, FencedNodes, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	for range 2 { // idempotent
		if err := e.Taint(ctx, "node1", true); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[1].Key != TaintKey || n.Spec.Taints[1].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("taints %+v", n.Spec.Taints)
	}
	if on, err := e.Tainted(ctx, "node1"); !on || err != nil {
		t.Fatalf("tainted %v %v", on, err)
	}
	if l := listed(); l["node1"] != "fenced" || l["node2"] != "fenced" {
		t.Fatalf("the fenced node is not listed for the pod deletions' policy: %v", l)
	}
	if err := e.Taint(ctx, "node1", false); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "other" {
		t.Fatalf("taints after lifting %+v", n.Spec.Taints)
	}
	if l := listed(); len(l) != 1 || l["node2"] != "fenced" {
		t.Fatalf("after lifting, the fenced list: %v (node2's entry is another fence's)", l)
	}
	if err := e.Unplace(ctx, "node1", "pvc-1"); err != nil {
		t.Fatal(err)
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if _, ok := n.Labels["replica.ferry.zfs.csi.io/pvc-1"]; ok || n.Labels["keep"] != "x" {
		t.Fatalf("labels %v", n.Labels)
	}
}
