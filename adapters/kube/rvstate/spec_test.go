package rvstate

import (
	"context"
	"errors"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

func TestAVolumesSpecReadsBackFromItsReplicatedVolume(t *testing.T) {
	spec := ports.VolumeSpec{CapacityBytes: 1 << 30, SnapshotInterval: 5 * time.Second, PersistentVolume: "pvc-1", StorageClass: "ferry",
		ClaimNamespace: "shop", ClaimName: "data"}
	// The object CreateWithSpec makes (the fake client has no status
	// subresource: its status write would replace the spec).
	rv := rvapi.FromState(replica.State{Volume: "pvc-1", ReplicationFactor: 2})
	rv.Spec.Describe(spec)
	u, err := encode(rv)
	if err != nil {
		t.Fatal(err)
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
		map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"}, u)
	s := New(client, nil)
	ctx := context.Background()
	got, err := s.Spec(ctx, "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.PersistentVolume != "pvc-1" || got.ClaimNamespace != "shop" || got.ClaimName != "data" || got.StorageClass != "ferry" ||
		got.CapacityBytes != 1<<30 || got.SnapshotInterval != 5*time.Second {
		t.Errorf("Spec = %+v, want %+v", got, spec)
	}
	if _, err := s.Spec(ctx, "pvc-2"); !errors.Is(err, ports.ErrNotFound) {
		t.Errorf("Spec of a volume without a state: %v, want ErrNotFound", err)
	}
}
