package workload

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// The pod that replaces a stopping daemon's is another pod of its own
// DaemonSet on its own node, not being deleted; its daemon has started
// once its ferry container runs. Pods of other nodes, of other owners and
// being deleted are none of it.
func TestTheNextDaemonIsTheOtherPodOfTheSameDaemonSetOnTheSameNode(t *testing.T) {
	ctx := context.Background()
	isController := true
	ds := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ferry-node", UID: types.UID("ds-uid"), Controller: &isController}
	other := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "something-else", UID: types.UID("other-uid"), Controller: &isController}
	grace := metav1.NewTime(time.Date(2026, 11, 28, 3, 5, 0, 0, time.UTC))
	running := []corev1.ContainerStatus{{Name: "ferry", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	waiting := []corev1.ContainerStatus{{Name: "ferry", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	pod := func(name, node string, owner metav1.OwnerReference, deleting bool, st []corev1.ContainerStatus) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ferry-system", Name: name, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{ContainerStatuses: st}}
		if deleting {
			p.DeletionTimestamp = &grace
		}
		return p
	}
	own := pod("ferry-node-old", "node1", ds, true, running)
	cases := []struct {
		name   string
		pods   []*corev1.Pod
		found  bool
		pod    string
		runnin bool
	}{
		{"none", nil, false, "", false},
		{"another node's, another owner's, one being deleted: none", []*corev1.Pod{
			pod("ferry-node-x", "node2", ds, false, running), pod("other", "node1", other, false, running), pod("ferry-node-gone", "node1", ds, true, running)}, false, "", false},
		{"pulling its image", []*corev1.Pod{pod("ferry-node-new", "node1", ds, false, waiting)}, true, "ferry-node-new", false},
		{"its daemon started", []*corev1.Pod{pod("ferry-node-new", "node1", ds, false, running)}, true, "ferry-node-new", true},
	}
	for _, c := range cases {
		client := fake.NewClientset(own)
		for _, p := range c.pods {
			if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := NextDaemons{Client: client, Namespace: "ferry-system", Pod: own.Name, Container: "ferry"}.NextDaemon(ctx)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got.Found != c.found || got.Pod != c.pod || got.Running != c.runnin || !got.GraceEnds.Equal(grace.Time) {
			t.Errorf("%s: %+v, want found %v pod %q running %v, grace ending %v", c.name, got, c.found, c.pod, c.runnin, grace.Time)
		}
	}
	if _, err := (NextDaemons{Client: fake.NewClientset(), Namespace: "ferry-system", Pod: "missing", Container: "ferry"}).NextDaemon(ctx); err == nil {
		t.Error("no error when the daemon's own pod cannot be read")
	}
}
