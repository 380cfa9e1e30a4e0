package workload

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The pod that replaces a stopping daemon's is another pod of its own
// DaemonSet for its own node, bound to it or not scheduled yet (the
// DaemonSet controller names the node in a required node affinity and
// deletes an unready old pod as soon as the new one exists), not being
// deleted and not ended; its daemon has started once its ferry container
// runs. Pods of other nodes, of other owners, being deleted or ended are
// none of it.
func TestTheNextDaemonIsTheOtherPodOfTheSameDaemonSetForTheSameNode(t *testing.T) {
	ctx := context.Background()
	isController := true
	labels := map[string]string{"app.kubernetes.io/component": "node"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry-system", Name: "ferry-node", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	ref := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ferry-node", UID: types.UID("ds-uid"), Controller: &isController}
	other := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "something-else", UID: types.UID("other-uid"), Controller: &isController}
	deleted := metav1.NewTime(time.Date(2026, 11, 28, 3, 5, 0, 0, time.UTC))
	grace := int64(300)
	running := []corev1.ContainerStatus{{Name: "ferry", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	waiting := []corev1.ContainerStatus{{Name: "ferry", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	pod := func(name, node string, owner metav1.OwnerReference, deleting bool, st []corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry-system", Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: st}}
		if deleting {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &deleted, &grace
		}
		return p
	}
	unscheduled := func(name, node string) *corev1.Pod {
		p := pod(name, "", ref, false, nil)
		p.Status.Phase = corev1.PodPending
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
		return p
	}
	failed := pod("ferry-node-failed", "node1", ref, false, nil)
	failed.Status.Phase = corev1.PodFailed
	own := pod("ferry-node-old", "node1", ref, true, running)
	cases := []struct {
		name    string
		pods    []*corev1.Pod
		found   bool
		pod     string
		running bool
	}{
		{"none", nil, false, "", false},
		{"another node's, another owner's, one being deleted, one failed: none", []*corev1.Pod{
			pod("ferry-node-x", "node2", ref, false, running), pod("other", "node1", other, false, running),
			pod("ferry-node-gone", "node1", ref, true, running), failed, unscheduled("ferry-node-y", "node2")}, false, "", false},
		{"not scheduled yet, meant for this node", []*corev1.Pod{unscheduled("ferry-node-new", "node1")}, true, "ferry-node-new", false},
		{"pulling its image", []*corev1.Pod{pod("ferry-node-new", "node1", ref, false, waiting)}, true, "ferry-node-new", false},
		{"its daemon started", []*corev1.Pod{pod("ferry-node-new", "node1", ref, false, running)}, true, "ferry-node-new", true},
	}
	for _, c := range cases {
		objs := []runtime.Object{own, ds}
		for _, p := range c.pods {
			objs = append(objs, p)
		}
		got, err := NextDaemons{Client: fake.NewClientset(objs...), Namespace: "ferry-system", Pod: own.Name, Container: "ferry"}.NextDaemon(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !got.Deleting || got.Grace != 300*time.Second || got.Found != c.found || got.Pod != c.pod || got.Running != c.running {
			t.Errorf("%s: %+v, want deleting, grace 300s, found %v pod %q running %v", c.name, got, c.found, c.pod, c.running)
		}
	}

	// The own pod gone (a forced deletion) or unreadable for want of
	// rights (an uninstall deleted them): nothing to wait for. Any other
	// failure is one.
	got, err := NextDaemons{Client: fake.NewClientset(), Namespace: "ferry-system", Pod: "missing", Container: "ferry"}.NextDaemon(ctx)
	if err != nil || !got.Gone {
		t.Errorf("own pod gone: %+v %v, want gone and no error", got, err)
	}
	gr := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct {
		verb, resource string
		err            error
		gone           bool
	}{
		{"get", "pods", apierrors.NewForbidden(gr, own.Name, nil), true},
		{"get", "daemonsets", apierrors.NewNotFound(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "ferry-node"), true},
		{"list", "pods", apierrors.NewUnauthorized("token gone"), true},
		{"get", "pods", apierrors.NewServiceUnavailable("apiserver away"), false},
		{"list", "pods", apierrors.NewTimeoutError("slow", 1), false},
	} {
		client := fake.NewClientset(own, ds)
		client.PrependReactor(c.verb, c.resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, c.err })
		got, err := NextDaemons{Client: client, Namespace: "ferry-system", Pod: own.Name, Container: "ferry"}.NextDaemon(ctx)
		if c.gone && (err != nil || !got.Gone) {
			t.Errorf("%s %s: %v: %+v %v, want gone and no error", c.verb, c.resource, c.err, got, err)
		}
		if !c.gone && err == nil {
			t.Errorf("%s %s: %v: no error", c.verb, c.resource, c.err)
		}
	}
	// A pod not being deleted, with its own grace period: read as such.
	live := pod("ferry-node-live", "node1", ref, false, running)
	thirty := int64(30)
	live.Spec.TerminationGracePeriodSeconds = &thirty
	got, err = NextDaemons{Client: fake.NewClientset(live, ds), Namespace: "ferry-system", Pod: live.Name, Container: "ferry"}.NextDaemon(ctx)
	if err != nil || got.Deleting || got.Gone || got.Grace != 30*time.Second {
		t.Errorf("a pod not being deleted: %+v %v", got, err)
	}
}
