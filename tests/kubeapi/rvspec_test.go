//go:build apiserver

package kubeapi_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// The ReplicatedVolume's spec says what the volume is: what the
// controller knows at creation lands in the object (the schema keeps
// every field; nothing is pruned) and survives the status writes that
// follow.
func TestTheReplicatedVolumesSpecSaysWhatTheVolumeIs(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	ctx := context.Background()
	st := replica.State{Volume: "pvc-spec", ReplicationFactor: 2, Epoch: 1, Primary: "node-a", Replicas: []replica.Replica{{Node: "node-a", Active: true}}}
	spec := ports.VolumeSpec{CapacityBytes: 5 << 30, SnapshotInterval: 90 * time.Second, PersistentVolume: "pvc-spec",
		StorageClass: "ferry-replicated", ClaimNamespace: "shop", ClaimName: "orders",
		Properties: map[string]string{"atime": "off", "compression": "zstd-3", "recordsize": "16384"}}
	if _, err := s.CreateWithSpec(ctx, st, spec); err != nil {
		t.Fatal(err)
	}
	// A status write after it (the replicas' reports) keeps the spec.
	if _, err := s.Update(ctx, st.Volume, func(s *replica.State) error { s.Replicas[0].Snapshot, s.Replicas[0].SnapshotEpoch = 1, 1; return nil }); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(rvapi.GVR).Get(ctx, rvapi.ObjectName(st.Volume), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"volumeID": "pvc-spec", "replicationFactor": int64(2), "capacityBytes": int64(5 << 30), "snapshotInterval": "1m30s",
		"persistentVolumeName": "pvc-spec", "storageClassName": "ferry-replicated", "claimNamespace": "shop", "claimName": "orders",
		"properties": map[string]any{"atime": "off", "compression": "zstd-3", "recordsize": "16384"}}
	got, _, _ := unstructured.NestedMap(u.Object, "spec")
	for k, v := range want {
		if !reflect.DeepEqual(got[k], v) {
			t.Errorf("spec.%s = %#v, want %#v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("spec = %v, want exactly %v", got, want)
	}
	// Every copy reads them back (replica.State.Properties).
	if read, err := s.Get(ctx, st.Volume); err != nil || !reflect.DeepEqual(read.Properties, spec.Properties) {
		t.Errorf("state read back: properties %v (%v), want %v", read.Properties, err, spec.Properties)
	}
	// The schema refuses a property value Ferry would not set.
	bad := u.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, "rot13", "spec", "properties", "compression")
	admin := dynamic.NewForConfigOrDie(cfg)
	if _, err := admin.Resource(rvapi.GVR).Update(ctx, bad, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "spec.properties.compression") {
		t.Errorf("spec.properties.compression=rot13: %v, want refused by the schema", err)
	}

	// Create, knowing nothing but the state, writes no such fields.
	if _, err := s.Create(ctx, replica.State{Volume: "pvc-bare", ReplicationFactor: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	u, err = dyn.Resource(rvapi.GVR).Get(ctx, "pvc-bare", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedMap(u.Object, "spec"); len(got) != 2 {
		t.Errorf("spec of a bare Create = %v, want volumeID and replicationFactor only", got)
	}
}
