package workload

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/ports"
)

// NextDaemons reads, for the daemon of pod Namespace/Pod, the pod that
// replaces it on its node: another pod of the same DaemonSet (by the
// controller's UID) for the same node, bound to it or not scheduled yet
// (the DaemonSet controller makes its pods with a node affinity naming
// their node, and deletes an unready old pod as soon as the new one
// exists), not being deleted and not ended.
type NextDaemons struct {
	Client    kubernetes.Interface
	Namespace string
	Pod       string
	// Container is the daemon's container in the pods (ferry).
	Container string
}

var _ ports.NextDaemons = NextDaemons{}

// gone says whether err means there is nothing left to read: the own pod
// or its DaemonSet deleted (a forced deletion, an uninstall), or this
// daemon's access removed with them (an uninstall deletes its RBAC).
func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
}

// NextDaemon implements ports.NextDaemons.
func (n NextDaemons) NextDaemon(ctx context.Context) (liveness.NextDaemon, error) {
	var next liveness.NextDaemon
	own, err := n.Client.CoreV1().Pods(n.Namespace).Get(ctx, n.Pod, metav1.GetOptions{})
	if gone(err) {
		return liveness.NextDaemon{Gone: true}, nil
	}
	if err != nil {
		return next, fmt.Errorf("read the daemon's own pod %s/%s: %w", n.Namespace, n.Pod, err)
	}
	next.Deleting = own.DeletionTimestamp != nil
	// The deletion's grace period, else the pod's (Kubernetes' default
	// when neither is set).
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := own.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if g := own.DeletionGracePeriodSeconds; g != nil {
		grace = *g
	}
	next.Grace = time.Duration(grace) * time.Second
	owner := metav1.GetControllerOf(own)
	if owner == nil || owner.Kind != "DaemonSet" || own.Spec.NodeName == "" {
		next.Gone = true // nothing replaces it
		return next, nil
	}
	ds, err := n.Client.AppsV1().DaemonSets(n.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
	if gone(err) {
		next.Gone = true
		return next, nil
	}
	if err != nil {
		return next, fmt.Errorf("read DaemonSet %s/%s: %w", n.Namespace, owner.Name, err)
	}
	if ds.UID != owner.UID || ds.Spec.Selector == nil || ds.DeletionTimestamp != nil {
		next.Gone = true // deleted, or another DaemonSet of the name: nothing replaces it
		return next, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return next, fmt.Errorf("DaemonSet %s/%s: %w", n.Namespace, ds.Name, err)
	}
	// The node's pods and the unscheduled ones (two field selectors, so
	// that a large cluster's daemon pods are not all read twice a second).
	var items []corev1.Pod
	for _, node := range []string{own.Spec.NodeName, ""} {
		pods, err := n.Client.CoreV1().Pods(n.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String(),
			FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if gone(err) {
			next.Gone = true
			return next, nil
		}
		if err != nil {
			return next, fmt.Errorf("list the pods of DaemonSet %s/%s: %w", n.Namespace, ds.Name, err)
		}
		items = append(items, pods.Items...)
	}
	for _, p := range items {
		c := metav1.GetControllerOf(&p)
		if p.Name == own.Name || p.DeletionTimestamp != nil || c == nil || c.UID != owner.UID ||
			p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded || targetNode(&p) != own.Spec.NodeName {
			continue
		}
		next.Found, next.Pod = true, p.Name
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == n.Container && cs.State.Running != nil {
				next.Running = true
			}
		}
		if next.Running {
			break
		}
	}
	return next, nil
}

// targetNode is the node a DaemonSet's pod is for: the node it is bound
// to, else the one its required node affinity names by metadata.name (as
// the DaemonSet controller makes them), else "".
func targetNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}
