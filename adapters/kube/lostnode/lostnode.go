// Package lostnode is ports.FailoverEffects on Kubernetes: what a
// surviving daemon does to a node whose volumes it took over. It removes
// the node's placement label of the volume (a JSON merge patch naming that
// one label), taints the node ferry.zfs.csi.io/fenced:NoSchedule, and
// force-deletes the node's replica pods of the volume (in Ferry's
// namespace) and then its pods that use the volume and have a controller
// (grace 0, the pod's UID as a precondition), so that their controllers
// recreate them where the volume now lives. deploy's admission policy lets
// the daemon's ServiceAccount change nothing else on a node.
package lostnode

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// TaintKey is Ferry's taint of a fenced node (effect NoSchedule).
const TaintKey = ports.FencedTaint

// Effects carries out a takeover's effects.
type Effects struct {
	client kubernetes.Interface
	driver string
	// replicas is the namespace of the volumes' replica pods ("": none
	// run, replication is off).
	replicas string
}

var _ ports.FailoverEffects = (*Effects)(nil)

// New returns the effects of driver's takeovers; the volumes' replica
// pods run in namespace replicas ("" when replication is off).
func New(client kubernetes.Interface, driver, replicas string) *Effects {
	return &Effects{client: client, driver: driver, replicas: replicas}
}

// Unplace removes node's placement label of id.
func (e *Effects) Unplace(ctx context.Context, node replica.Node, id volume.ID) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{rvapi.UsableLabel(id): nil}}})
	if err != nil {
		return err
	}
	if _, err := e.client.CoreV1().Nodes().Patch(ctx, string(node), types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ferry-daemon"}); err != nil {
		return fmt.Errorf("remove the placement of %s from node %s: %w", id, node, err)
	}
	return nil
}

// OutOfServiceTaint is Kubernetes' taint of a node known to be shut down
// (non-graceful node shutdown).
const OutOfServiceTaint = "node.kubernetes.io/out-of-service"

// OutOfService lists the nodes carrying the out-of-service taint (any
// value and effect), by a consistent read (served from the API server's
// cache once it has caught up: "any version" answered from a cache
// seconds behind on the test cluster, and the taint was seen about 5 s
// after it was set).
func (e *Effects) OutOfService(ctx context.Context) ([]replica.Node, error) {
	nodes, err := e.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []replica.Node
	for _, n := range nodes.Items {
		for _, t := range n.Spec.Taints {
			if t.Key == OutOfServiceTaint {
				out = append(out, replica.Node(n.Name))
				break
			}
		}
	}
	return out, nil
}

// Tainted reports whether node carries Ferry's taint.
func (e *Effects) Tainted(ctx context.Context, node replica.Node) (bool, error) {
	n, err := e.client.CoreV1().Nodes().Get(ctx, string(node), metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("read node %s: %w", node, err)
	}
	for _, t := range n.Spec.Taints {
		if t.Key == TaintKey {
			return true, nil
		}
	}
	return false, nil
}

// FencedNodes is the ConfigMap, in the replicas' namespace, listing the
// nodes Ferry fenced (a key per node): deploy's admission policy
// (admission-pod-deletions.yaml) lets the node daemon delete pods only on
// its own node and on a node listed there, so a daemon cannot delete
// pods anywhere it likes, and every node it claims is fenced is on record.
const FencedNodes = "ferry-fenced-nodes"

// fencedValue is the value of a fenced node's key in FencedNodes.
const fencedValue = "fenced"

// Taint sets (on) or removes Ferry's taint on node, by compare-and-swap
// of the node (other taints are kept as they are), and lists the node in
// FencedNodes (before its pods may be deleted) or takes it off (before
// the taint is lifted).
func (e *Effects) Taint(ctx context.Context, node replica.Node, on bool) error {
	if !on {
		if err := e.listFenced(ctx, node, false); err != nil {
			return err
		}
	}
	if err := e.taint(ctx, node, on); err != nil {
		return err
	}
	if on {
		return e.listFenced(ctx, node, true)
	}
	return nil
}

// listFenced adds node to FencedNodes, or takes it off (a JSON merge
// patch of its one key: daemons fencing other nodes at once do not
// conflict; writing what is there already writes nothing).
func (e *Effects) listFenced(ctx context.Context, node replica.Node, on bool) error {
	if e.replicas == "" {
		return nil
	}
	var v any
	if on {
		v = fencedValue
	}
	body, err := json.Marshal(map[string]any{"data": map[string]any{string(node): v}})
	if err != nil {
		return err
	}
	_, err = e.client.CoreV1().ConfigMaps(e.replicas).Patch(ctx, FencedNodes, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ferry-daemon"})
	if apierrors.IsNotFound(err) {
		// Deleted by hand: the policy then refuses every deletion of the
		// daemon's (it fails closed), until the list is there again.
		data := map[string]string{}
		if on {
			data[string(node)] = fencedValue
		}
		err = e.createFencedList(ctx, data)
	}
	if err != nil {
		return fmt.Errorf("list node %s as fenced (%v) in ConfigMap %s/%s (deploy/fenced-nodes.yaml): %w", node, on, e.replicas, FencedNodes, err)
	}
	return nil
}

// EnsureFencedList makes FencedNodes, empty, if it is missing (the
// daemon's start): without it admission-pod-deletions.yaml refuses every
// pod deletion of the daemon's, its own node's too.
func (e *Effects) EnsureFencedList(ctx context.Context) error {
	if e.replicas == "" {
		return nil
	}
	_, err := e.client.CoreV1().ConfigMaps(e.replicas).Get(ctx, FencedNodes, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		err = e.createFencedList(ctx, nil)
	}
	if err != nil {
		return fmt.Errorf("the list of fenced nodes %s/%s: %w", e.replicas, FencedNodes, err)
	}
	return nil
}

func (e *Effects) createFencedList(ctx context.Context, data map[string]string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: FencedNodes, Namespace: e.replicas,
		Labels: map[string]string{"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "node"}}, Data: data}
	_, err := e.client.CoreV1().ConfigMaps(e.replicas).Create(ctx, cm, metav1.CreateOptions{FieldManager: "ferry-daemon"})
	if apierrors.IsAlreadyExists(err) {
		if len(data) == 0 {
			return nil
		}
		return fmt.Errorf("%s/%s made meanwhile: %w", e.replicas, FencedNodes, ports.ErrConflict)
	}
	return err
}

func (e *Effects) taint(ctx context.Context, node replica.Node, on bool) error {
	for attempt := 0; ; attempt++ {
		n, err := e.client.CoreV1().Nodes().Get(ctx, string(node), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("read node %s: %w", node, err)
		}
		taints := []corev1.Taint{}
		has := false
		for _, t := range n.Spec.Taints {
			if t.Key == TaintKey {
				has = true
				continue
			}
			taints = append(taints, t)
		}
		if has == on {
			return nil
		}
		if on {
			now := metav1.Now()
			taints = append(taints, corev1.Taint{Key: TaintKey, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now})
		}
		// A JSON patch testing the resourceVersion: a compare-and-swap of
		// the taints with nothing but patch rights on nodes.
		body, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
			{"op": "add", "path": "/spec/taints", "value": taints},
		})
		if err != nil {
			return err
		}
		_, err = e.client.CoreV1().Nodes().Patch(ctx, string(node), types.JSONPatchType, body, metav1.PatchOptions{FieldManager: "ferry-daemon"})
		if err == nil {
			return nil
		}
		if !(apierrors.IsConflict(err) || apierrors.IsInvalid(err)) || attempt >= 5 {
			return fmt.Errorf("taint node %s (%v): %w", node, on, err)
		}
	}
}

// EvictPods force-deletes node's pods that use id's claim and have a
// controller.
func (e *Effects) EvictPods(ctx context.Context, node replica.Node, id volume.ID) ([]string, error) {
	ns, claim, err := e.claimOf(ctx, id)
	if err != nil || claim == "" {
		return nil, err
	}
	pods, err := e.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", string(node)).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s in %s: %w", node, ns, err)
	}
	var deleted []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != string(node) || !usesClaim(p, claim) || metav1.GetControllerOf(&p) == nil {
			continue
		}
		ok, err := e.forceDelete(ctx, ns, p)
		if err != nil {
			return deleted, fmt.Errorf("on node %s: %w", node, err)
		}
		if ok {
			deleted = append(deleted, ns+"/"+p.Name)
		}
	}
	return deleted, nil
}

// RemoveReplicaPods force-deletes node's replica pods of id: the pods in
// the replica namespace carrying the volume's label (the ReplicaSet's and
// the one outside it alike).
func (e *Effects) RemoveReplicaPods(ctx context.Context, node replica.Node, id volume.ID) ([]string, error) {
	if e.replicas == "" {
		return nil, nil
	}
	// Only the ended term's primary's pod, outside the ReplicaSet: the
	// ReplicaSet's own pods on a lost node (a secondary's) stay until the
	// node returns or Kubernetes evicts them. Removing those would have a
	// node judged lost by its lease alone (a daemon restarting slowly, a
	// short partition) cost every volume there a full copy elsewhere.
	pods, err := e.client.CoreV1().Pods(e.replicas).List(ctx, metav1.ListOptions{
		LabelSelector: rvapi.LabelVolume + "=" + rvapi.Hash(id) + "," + rvapi.LabelComponent + "=" + rvapi.ComponentPrimary,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", string(node)).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list the replica pods of volume %s on node %s: %w", id, node, err)
	}
	var deleted []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != string(node) || p.Labels[rvapi.LabelVolume] != rvapi.Hash(id) || p.Labels[rvapi.LabelComponent] != rvapi.ComponentPrimary {
			continue
		}
		ok, err := e.forceDelete(ctx, e.replicas, p)
		if err != nil {
			return deleted, fmt.Errorf("replica pod of volume %s on node %s: %w", id, node, err)
		}
		if ok {
			deleted = append(deleted, e.replicas+"/"+p.Name)
		}
	}
	return deleted, nil
}

// forceDelete deletes pod p of namespace ns at once (grace 0), only if it
// is still the pod listed (its UID as a precondition); false when it is
// gone already or another pod took its name.
func (e *Effects) forceDelete(ctx context.Context, ns string, p corev1.Pod) (bool, error) {
	zero := int64(0)
	uid := p.UID
	err := e.client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return false, nil // not ours to delete
	}
	return false, fmt.Errorf("force-delete pod %s/%s: %w", ns, p.Name, err)
}

// claimOf finds the claim bound to id's PersistentVolume: the PV named
// after the volume (the external-provisioner names both alike), checked to
// be this driver's with that handle, else a search of the PVs.
func (e *Effects) claimOf(ctx context.Context, id volume.ID) (string, string, error) {
	match := func(pv *corev1.PersistentVolume) bool {
		return pv.Spec.CSI != nil && pv.Spec.CSI.Driver == e.driver && pv.Spec.CSI.VolumeHandle == string(id) && pv.Spec.ClaimRef != nil
	}
	if pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, string(id), metav1.GetOptions{}); err == nil && match(pv) {
		return pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, nil
	}
	list, err := e.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", fmt.Errorf("find the claim of volume %s: %w", id, err)
	}
	for i := range list.Items {
		if match(&list.Items[i]) {
			return list.Items[i].Spec.ClaimRef.Namespace, list.Items[i].Spec.ClaimRef.Name, nil
		}
	}
	return "", "", nil
}

func usesClaim(p corev1.Pod, claim string) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
		if v.Ephemeral != nil && p.Name+"-"+v.Name == claim {
			return true
		}
	}
	return false
}
