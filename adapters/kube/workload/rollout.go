package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// containerName is the replica pods' one container.
const containerName = "volume-manager"

var _ ports.ReplicaRollout = (*Applier)(nil)

// FollowDaemon makes t the template of the daemon pod ns/pod: its replica
// pods run the image of the pod's container (one image, one binary: the
// volume managers are the daemon's version), and the DaemonSet that owns
// the pod is the one whose current image Current compares with.
func FollowDaemon(ctx context.Context, client kubernetes.Interface, t Template, ns, pod, container string) (Template, error) {
	p, err := client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return t, fmt.Errorf("read the daemon's own pod %s/%s: %w", ns, pod, err)
	}
	image := ""
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			image = c.Image
		}
	}
	if image == "" {
		return t, fmt.Errorf("the daemon's pod %s/%s has no container %q", ns, pod, container)
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "DaemonSet" {
		return t, fmt.Errorf("the daemon's pod %s/%s is not a DaemonSet's", ns, pod)
	}
	t.Image = image
	t.Daemon = DaemonRef{Namespace: ns, DaemonSet: owner.Name, Container: container, Pod: pod}
	return t, nil
}

// daemonImageID is the image ID the daemon's own container runs (its
// status's imageID; "" until the kubelet reported it, or when the pod
// cannot be read): a replica pod whose container runs the same ID runs the
// daemon's image, whatever name the runtime reports for it.
func (a *Applier) daemonImageID(ctx context.Context) string {
	if id := a.imageID.Load(); id != nil {
		return *id
	}
	d := a.tpl.Daemon
	if d.Pod == "" {
		return ""
	}
	p, err := a.client.CoreV1().Pods(d.Namespace).Get(ctx, d.Pod, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == d.Container && cs.State.Running != nil && cs.ImageID != "" {
			a.imageID.Store(&cs.ImageID)
			return cs.ImageID
		}
	}
	return ""
}

// Current implements ports.ReplicaRollout: the DaemonSet's template names
// this daemon's image.
func (a *Applier) Current(ctx context.Context) (bool, error) {
	d := a.tpl.Daemon
	if d.DaemonSet == "" {
		return false, nil
	}
	ds, err := a.client.AppsV1().DaemonSets(d.Namespace).Get(ctx, d.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read DaemonSet %s/%s: %w", d.Namespace, d.DaemonSet, err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == d.Container {
			return c.Image == a.tpl.Image, nil
		}
	}
	return false, nil
}

// RolloutPods implements ports.ReplicaRollout. The volume's ReplicaSet
// template is set to this daemon's image first (a ReplicaSet does not
// restart its pods for a new template: the pods it makes from now on run
// it, the running ones are renewed one by one).
func (a *Applier) RolloutPods(ctx context.Context, id volume.ID) ([]placement.RollPod, error) {
	rss := a.client.AppsV1().ReplicaSets(a.tpl.Namespace)
	rs, err := rss.Get(ctx, Name(id), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("workload of volume %s: %w", id, ports.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("workload of volume %s: %w", id, err)
	}
	if image(rs.Spec.Template.Spec) != a.tpl.Image {
		patch, err := imagePatch(a.tpl.Image)
		if err != nil {
			return nil, err
		}
		body := fmt.Appendf(nil, `{"spec":{"template":%s}}`, patch)
		if _, err := rss.Patch(ctx, rs.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
			return nil, fmt.Errorf("set the image of ReplicaSet %s/%s: %w", a.tpl.Namespace, rs.Name, err)
		}
	}
	pods, err := a.client.CoreV1().Pods(a.tpl.Namespace).List(ctx, metav1.ListOptions{LabelSelector: rvapi.LabelVolume + "=" + rvapi.Hash(id)})
	if err != nil {
		return nil, fmt.Errorf("replica pods of volume %s: %w", id, err)
	}
	self := a.daemonImageID(ctx)
	out := make([]placement.RollPod, 0, len(pods.Items))
	for _, p := range pods.Items {
		renewed, runs := image(p.Spec) == a.tpl.Image, running(p, a.tpl.Image, self)
		out = append(out, placement.RollPod{
			Name:        p.Name,
			Node:        replica.Node(p.Spec.NodeName),
			Primary:     p.Labels[labelComponent] == ComponentPrimary,
			Current:     renewed && runs,
			Ready:       ready(p),
			Terminating: p.DeletionTimestamp != nil,
			Restarting:  renewed && !runs,
		})
	}
	return out, nil
}

// Renew implements ports.ReplicaRollout: the pod's container image is set
// to this daemon's (a pod's image is the one field of a running pod's
// containers that may change; the kubelet restarts that container).
func (a *Applier) Renew(ctx context.Context, id volume.ID, pod string) error {
	p, err := a.client.CoreV1().Pods(a.tpl.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("replica pod %s of volume %s: %w", pod, id, err)
	}
	if p.Labels[rvapi.LabelVolume] != rvapi.Hash(id) {
		return fmt.Errorf("pod %s/%s is not a replica pod of volume %s: %w", a.tpl.Namespace, pod, id, ports.ErrInvalid)
	}
	// The UID a precondition: the pod read is the pod renewed.
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": p.UID},
		"spec": map[string]any{"containers": []map[string]string{{"name": containerName, "image": a.tpl.Image}}}})
	if err != nil {
		return err
	}
	if _, err := a.client.CoreV1().Pods(a.tpl.Namespace).Patch(ctx, pod, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "ferry"}); err != nil {
		return fmt.Errorf("renew replica pod %s/%s on %s: %w", a.tpl.Namespace, pod, a.tpl.Image, err)
	}
	return nil
}

// imagePatch is the strategic merge patch of a pod spec's volume-manager
// container image: {"spec":{"containers":[{"name":...,"image":...}]}}.
func imagePatch(img string) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{"containers": []map[string]string{{"name": containerName, "image": img}}}})
}

func image(s corev1.PodSpec) string {
	for _, c := range s.Containers {
		if c.Name == containerName {
			return c.Image
		}
	}
	return ""
}

// running reports whether the pod's volume-manager container runs img
// (its status names the image the kubelet started; until the restart
// after a renewal it still names the old one, so that the roll waits for
// the restart, not only for the patch). The status's name is one of the
// names the runtime holds for the image (containerd reports the first):
// an image tagged twice (v0.2.0 and dev) may be reported by the other
// name, so a container running the image ID of the daemon's own
// container (imageID, "" when unknown) runs img too.
func running(p corev1.Pod, img, imageID string) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerName {
			return cs.State.Running != nil && (shortImage(cs.Image) == shortImage(img) || imageID != "" && cs.ImageID == imageID)
		}
	}
	return false
}

// shortImage drops the default registry a runtime may add to a name
// (ferry:dev is reported as docker.io/library/ferry:dev).
func shortImage(s string) string {
	s = strings.TrimPrefix(s, "docker.io/")
	return strings.TrimPrefix(s, "library/")
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
