package directory_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/directory"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

func TestTheDirectoryReadsFerrysNodesNodesAndVolumes(t *testing.T) {
	ctx := context.Background()
	daemon := map[string]string{"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "node"}
	pod := func(name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry-system", Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
	}
	pv := func(name, driver, handle string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("160Mi")},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle,
					VolumeAttributes: map[string]string{"replicationFactor": "3"}}}}}
	}
	c := fake.NewClientset(
		pod("ferry-node-1", "n2", daemon), pod("ferry-node-2", "n1", daemon), pod("ferry-node-3", "", daemon), // not scheduled yet
		pod("replica", "n3", map[string]string{"app.kubernetes.io/name": "ferry", "app.kubernetes.io/component": "replica"}),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		// Its daemon pod being replaced: the kubelet's label says Ferry ran there.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n4", Labels: map[string]string{"topology.ferry.zfs.csi.io/node": "n4"}}},
		pv("pvc-a", "ferry.zfs.csi.io", "pvc-a"), pv("pvc-other", "other.csi.io", "pvc-b"),
	)
	d := directory.New(c, "ferry-system", "ferry.zfs.csi.io", "topology.ferry.zfs.csi.io/node")
	nodes, err := d.FerryNodes(ctx)
	if err != nil || !slices.Equal(nodes, []replica.Node{"n1", "n2", "n4"}) {
		t.Fatalf("FerryNodes = %v, %v; want the daemon's scheduled nodes n1 and n2, and n4 Ferry registered on", nodes, err)
	}
	for n, want := range map[replica.Node]bool{"n1": true, "n2": false, "n4": true} {
		if got, err := d.NodeExists(ctx, n); err != nil || got != want {
			t.Errorf("NodeExists(%s) = %v, %v; want %v", n, got, err, want)
		}
	}
	for id, want := range map[string]bool{"pvc-a": true, "pvc-b": false, "pvc-c": false} {
		if v, got, err := d.Volume(ctx, volume.ID(id)); err != nil || got != want || got && (v.CapacityBytes != 160<<20 || v.ReplicationFactor != "3") {
			t.Errorf("Volume(%s) = %+v, %v, %v; want %v (160 MiB, factor 3)", id, v, got, err, want)
		}
	}
}
