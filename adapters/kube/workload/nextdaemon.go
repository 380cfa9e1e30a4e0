package workload

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/ports"
)

// NextDaemons reads, for the daemon of pod Namespace/Pod, the pod that
// replaces it on its node: another pod of the same DaemonSet (by the
// controller's UID) on the same node, not being deleted.
type NextDaemons struct {
	Client    kubernetes.Interface
	Namespace string
	Pod       string
	// Container is the daemon's container in the pods (ferry).
	Container string
}

var _ ports.NextDaemons = NextDaemons{}

// NextDaemon implements ports.NextDaemons.
func (n NextDaemons) NextDaemon(ctx context.Context) (liveness.NextDaemon, error) {
	var next liveness.NextDaemon
	own, err := n.Client.CoreV1().Pods(n.Namespace).Get(ctx, n.Pod, metav1.GetOptions{})
	if err != nil {
		return next, fmt.Errorf("read the daemon's own pod %s/%s: %w", n.Namespace, n.Pod, err)
	}
	if own.DeletionTimestamp != nil {
		next.GraceEnds = own.DeletionTimestamp.Time
	}
	owner := metav1.GetControllerOf(own)
	if owner == nil || own.Spec.NodeName == "" {
		return next, nil // no DaemonSet, or not on a node: nothing replaces it
	}
	pods, err := n.Client.CoreV1().Pods(n.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", own.Spec.NodeName).String()})
	if err != nil {
		return next, fmt.Errorf("list the pods of node %s: %w", own.Spec.NodeName, err)
	}
	for _, p := range pods.Items {
		c := metav1.GetControllerOf(&p)
		if p.Name == own.Name || p.DeletionTimestamp != nil || c == nil || c.UID != owner.UID || p.Spec.NodeName != own.Spec.NodeName {
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
