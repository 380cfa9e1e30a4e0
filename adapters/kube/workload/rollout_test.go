package workload

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/placement"
)

// A renewed replica pod runs the daemon's image once its container was
// restarted onto it, whichever of the image's names the runtime reports:
// an image tagged twice (a version and dev) is reported by its first name,
// and the pod runs the image ID of the daemon's own container. A pod whose
// container still runs the earlier image ID is not current yet.
func TestARenewedPodRunsTheDaemonsImageUnderAnyOfItsNames(t *testing.T) {
	ctx := context.Background()
	const (
		img     = "ghcr.io/ferry-csi/ferry:dev"
		newID   = "ghcr.io/ferry-csi/ferry@sha256:1111"
		earlier = "ghcr.io/ferry-csi/ferry@sha256:0000"
	)
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	daemon := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ferry-system", Name: "ferry-node-abc"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "ferry", Image: img}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "ferry", State: running,
			Image: "ghcr.io/ferry-csi/ferry:97a2faa", ImageID: newID}}},
	}
	owner := Owner{Volume: "pvc-1", Name: "pvc-1", UID: "u"}
	tp := tpl
	tp.Image = img
	tp.Daemon = DaemonRef{Namespace: "ferry-system", DaemonSet: "ferry-node", Container: "ferry", Pod: daemon.Name}
	rs := New(fake.NewClientset(), nil, tp).ReplicaSet(owner, placement.Objects{Secondaries: 2}, "")
	pod := func(name, statusImage, imageID string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ferry-system", Name: name, Labels: map[string]string{rvapi.LabelVolume: rvapi.Hash(owner.Volume)}},
			Spec:       corev1.PodSpec{NodeName: "node2", Containers: []corev1.Container{{Name: containerName, Image: img}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: containerName, State: running,
				Image: statusImage, ImageID: imageID}}},
		}
	}
	client := fake.NewClientset(daemon, rs,
		pod("restarted", "ghcr.io/ferry-csi/ferry:97a2faa", newID),
		pod("not-yet", "ghcr.io/ferry-csi/ferry:0123456", earlier))
	got, err := New(client, nil, tp).RolloutPods(ctx, owner.Volume)
	if err != nil {
		t.Fatal(err)
	}
	current := map[string]bool{}
	for _, p := range got {
		current[p.Name] = p.Current
	}
	if !current["restarted"] || current["not-yet"] || len(got) != 2 {
		t.Errorf("current: %v, want restarted (the daemon's image ID under another name) and not not-yet (the earlier ID)", current)
	}

	// The daemon's image ID unknown (its status not reported yet): by
	// name only, as before.
	daemon.Status.ContainerStatuses = nil
	client = fake.NewClientset(daemon, rs, pod("restarted", "ghcr.io/ferry-csi/ferry:97a2faa", newID), pod("named", img, newID))
	if got, err = New(client, nil, tp).RolloutPods(ctx, owner.Volume); err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if want := p.Name == "named"; p.Current != want {
			t.Errorf("without the daemon's image ID, %s current %v, want %v", p.Name, p.Current, want)
		}
	}
}
