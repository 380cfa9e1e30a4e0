// Package directory is ports.NodeDirectory and ports.VolumeDirectory on
// the Kubernetes API: the nodes Ferry runs on (those the node DaemonSet
// has a pod on, running or not: a node that is down still has its pod;
// and those carrying Ferry's topology label, which the kubelet set when
// Ferry registered there: a node whose daemon pod is being replaced at
// that moment is not missed), whether a Node object exists, and whether
// a PersistentVolume of Ferry's driver with a volume handle exists. Reads
// only.
package directory

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// DaemonSelector selects the node DaemonSet's pods (deploy/node-daemonset.yaml).
const DaemonSelector = "app.kubernetes.io/name=ferry,app.kubernetes.io/component=node"

// Directory reads the cluster.
type Directory struct {
	client    kubernetes.Interface
	namespace string // Ferry's: where the node DaemonSet runs
	driver    string
	topology  string // the topology label's key the kubelet sets for Ferry
}

var (
	_ ports.NodeDirectory   = (*Directory)(nil)
	_ ports.VolumeDirectory = (*Directory)(nil)
)

// New returns the directory of the cluster client reaches; namespace is
// the node DaemonSet's, driver the CSI driver name, topologyKey the key of
// its topology label on nodes.
func New(client kubernetes.Interface, namespace, driver, topologyKey string) *Directory {
	return &Directory{client: client, namespace: namespace, driver: driver, topology: topologyKey}
}

// FerryNodes lists the nodes the node DaemonSet has a pod scheduled on,
// and those carrying Ferry's topology label.
func (d *Directory) FerryNodes(ctx context.Context) ([]replica.Node, error) {
	labelled, err := d.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: d.topology})
	if err != nil {
		return nil, fmt.Errorf("list the nodes Ferry registered on: %w", err)
	}
	pods, err := d.client.CoreV1().Pods(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: DaemonSelector})
	if err != nil {
		return nil, fmt.Errorf("list the node daemon's pods: %w", err)
	}
	var nodes []replica.Node
	for _, p := range pods.Items {
		if n := replica.Node(p.Spec.NodeName); n != "" && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	for _, n := range labelled.Items {
		if !slices.Contains(nodes, replica.Node(n.Name)) {
			nodes = append(nodes, replica.Node(n.Name))
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

// NodeExists reports whether node's object exists.
func (d *Directory) NodeExists(ctx context.Context, node replica.Node) (bool, error) {
	_, err := d.client.CoreV1().Nodes().Get(ctx, string(node), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read node %s: %w", node, err)
	}
	return true, nil
}

// ReplicationFactorAttribute is the volume attribute (CSI volume
// context) CreateVolume records the replication factor in
// (provision.ContextReplicationFactor).
const ReplicationFactorAttribute = "replicationFactor"

// Volume finds the PersistentVolume of the driver with the volume handle
// id: its capacity and the replication factor in its volume attributes.
func (d *Directory) Volume(ctx context.Context, id volume.ID) (ports.UserVolume, bool, error) {
	pvs, err := d.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ports.UserVolume{}, false, fmt.Errorf("list persistent volumes: %w", err)
	}
	for _, pv := range pvs.Items {
		if c := pv.Spec.CSI; c != nil && c.Driver == d.driver && c.VolumeHandle == string(id) {
			v := ports.UserVolume{ReplicationFactor: c.VolumeAttributes[ReplicationFactorAttribute]}
			if q, ok := pv.Spec.Capacity[corev1.ResourceStorage]; ok {
				v.CapacityBytes = q.Value()
			}
			return v, true, nil
		}
	}
	return ports.UserVolume{}, false, nil
}
