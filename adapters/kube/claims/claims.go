// Package claims is ports.Claims on the Kubernetes API: the claims of
// Ferry's StorageClasses with Immediate binding that no node took yet,
// and the nodes that may take one, from shared informers; a node is
// selected by writing the claim's volume.kubernetes.io/selected-node
// annotation, which the external-provisioner of that node (with
// --node-deployment) acts on.
package claims

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// SelectedNode is the annotation the external-provisioner (and the
// scheduler, for WaitForFirstConsumer) reads as the node to provision on.
const SelectedNode = "volume.kubernetes.io/selected-node"

// Claims watches claims, classes and nodes.
type Claims struct {
	kube        kubernetes.Interface
	driver      string
	topologyKey string
	pvcs        corelisters.PersistentVolumeClaimLister
	classes     storagelisters.StorageClassLister
	nodes       corelisters.NodeLister
	changes     chan struct{}
}

var _ ports.Claims = (*Claims)(nil)

// Start runs the informers until ctx ends and returns once their caches
// are filled. driver is Ferry's CSI driver name (the classes'
// provisioner); topologyKey the node label of nodes running Ferry.
func Start(ctx context.Context, kube kubernetes.Interface, driver, topologyKey string) (*Claims, error) {
	f := informers.NewSharedInformerFactory(kube, 0)
	c := &Claims{kube: kube, driver: driver, topologyKey: topologyKey, changes: make(chan struct{}, 1),
		pvcs:    f.Core().V1().PersistentVolumeClaims().Lister(),
		classes: f.Storage().V1().StorageClasses().Lister(),
		nodes:   f.Core().V1().Nodes().Lister(),
	}
	notify := func() {
		select {
		case c.changes <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { notify() }, UpdateFunc: func(any, any) { notify() }, DeleteFunc: func(any) { notify() }}
	for _, inf := range []cache.SharedIndexInformer{
		f.Core().V1().PersistentVolumeClaims().Informer(),
		f.Storage().V1().StorageClasses().Informer(),
		f.Core().V1().Nodes().Informer(),
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("claims: the %v cache did not fill", typ)
		}
	}
	return c, nil
}

// Pending lists the claims of Ferry's Immediate classes with no volume and
// no selected node. Claims restored from a snapshot or cloned are left to
// their class's binding (the node holding the source must provision
// them): they are not listed.
func (c *Claims) Pending(context.Context) ([]ports.PendingClaim, error) {
	all, err := c.pvcs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []ports.PendingClaim
	for _, p := range all {
		if p.DeletionTimestamp != nil || p.Spec.VolumeName != "" || p.Status.Phase != corev1.ClaimPending ||
			p.Annotations[SelectedNode] != "" || p.Spec.DataSource != nil || p.Spec.DataSourceRef != nil ||
			p.Spec.StorageClassName == nil || *p.Spec.StorageClassName == "" {
			continue
		}
		sc, err := c.classes.Get(*p.Spec.StorageClassName)
		if err != nil || sc.Provisioner != c.driver ||
			(sc.VolumeBindingMode != nil && *sc.VolumeBindingMode != storagev1.VolumeBindingImmediate) {
			continue
		}
		out = append(out, ports.PendingClaim{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)})
	}
	return out, nil
}

// Candidates are the nodes labelled as running Ferry, schedulable and
// Ready.
func (c *Claims) Candidates(context.Context) ([]replica.Node, error) {
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []replica.Node
	for _, n := range all {
		if _, ferry := n.Labels[c.topologyKey]; !ferry || n.Spec.Unschedulable || !ready(n) {
			continue
		}
		out = append(out, replica.Node(n.Name))
	}
	return out, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Select writes the annotation on the claim read afresh, if it is still
// the same claim with no node, guarded by its resourceVersion.
func (c *Claims) Select(ctx context.Context, pc ports.PendingClaim, node replica.Node) error {
	pvcs := c.kube.CoreV1().PersistentVolumeClaims(pc.Namespace)
	p, err := pvcs.Get(ctx, pc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("claim %s/%s is gone: %w", pc.Namespace, pc.Name, ports.ErrConflict)
	case err != nil:
		return fmt.Errorf("read claim %s/%s: %w", pc.Namespace, pc.Name, err)
	case string(p.UID) != pc.UID || p.Annotations[SelectedNode] != "" || p.Spec.VolumeName != "":
		return fmt.Errorf("claim %s/%s was placed or replaced meanwhile: %w", pc.Namespace, pc.Name, ports.ErrConflict)
	}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[SelectedNode] = string(node)
	_, err = pvcs.Update(ctx, p, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return fmt.Errorf("claim %s/%s changed meanwhile: %w", pc.Namespace, pc.Name, ports.ErrConflict)
	case err != nil:
		return fmt.Errorf("select node %s for claim %s/%s: %w", node, pc.Namespace, pc.Name, err)
	}
	return nil
}

// Changes is notified on every informer event.
func (c *Claims) Changes() <-chan struct{} { return c.changes }
