//go:build apiserver

package kubeapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// deploy/crds/admission-replicatedvolumes.yaml on the real API server: only the
// node daemon deletes a ReplicatedVolume (a deletion destroys every copy);
// Ferry's pods change the main resource only to remove Ferry's finalizer
// from one being deleted; and a deletion with replicas listed waits, with
// a deletionTimestamp, until the last one left.
func TestOnlyFerryDeletesAReplicatedVolumeAndTheFinalizerHoldsItUntilTheLastCopy(t *testing.T) {
	cfg := start(t)
	ctx := context.Background()
	createPolicy(t, kubernetes.NewForConfigOrDie(cfg), "../../deploy/crds/admission-replicatedvolumes.yaml")
	admin := dynamic.NewForConfigOrDie(cfg).Resource(rvapi.GVR)
	nodeDyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, nodeDyn)
	replicaCfg := rest.CopyConfig(cfg)
	replicaCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ferry-system:ferry-replica"}
	replicaRVs := dynamic.NewForConfigOrDie(replicaCfg).Resource(rvapi.GVR)
	s := rvstate.New(nodeDyn, nil)
	st := replica.State{Volume: "pvc-del", ReplicationFactor: 2, Epoch: 1, Primary: "node-a", Replicas: []replica.Replica{
		{Node: "node-a", Snapshot: 3, SnapshotEpoch: 1, Active: true, Ready: true},
		{Node: "node-b", Snapshot: 3, SnapshotEpoch: 1, Ready: true},
	}}
	if _, err := s.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	// Policies take effect shortly after they are created: wait for the
	// first refusal of an administrator's deletion. (While it is not in
	// effect, the finalizer still holds the object.)
	deadline := time.Now().Add(time.Minute)
	for {
		err := admin.Delete(ctx, "pvc-del", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "delete its PersistentVolumeClaim") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never refused an administrator's deletion: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// An account named like the node daemon's in another namespace is not
	// Ferry's: its deletion is refused like anyone else's.
	impostorCfg := rest.CopyConfig(cfg)
	impostorCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:elsewhere:ferry-node"}
	impostor := dynamic.NewForConfigOrDie(impostorCfg).Resource(rvapi.GVR)
	if err := impostor.Delete(ctx, "pvc-del", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "delete its PersistentVolumeClaim") {
		t.Fatalf("an account named ferry-node outside ferry-system deleting a ReplicatedVolume: %v, want the policy's refusal", err)
	}
	patch := func(what, p string) error {
		_, err := replicaRVs.Patch(ctx, "pvc-del", types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	}
	for _, r := range []struct{ what, patch, says string }{
		{"scale it", `{"spec":{"replicationFactor":1}}`, "only remove Ferry's finalizer"},
		{"label it", `{"metadata":{"labels":{"x":"y"}}}`, "only remove Ferry's finalizer"},
		{"remove the finalizer of a volume not being deleted", `{"metadata":{"finalizers":null}}`, "only from a ReplicatedVolume being deleted"},
		{"add a finalizer", `{"metadata":{"finalizers":["ferry.zfs.csi.io/replicas","x/y"]}}`, "only remove Ferry's finalizer"},
	} {
		if err := patch(r.what, r.patch); err == nil || !strings.Contains(err.Error(), r.says) {
			t.Errorf("a replica pod tried to %s: got %v, want a refusal saying %q", r.what, err, r.says)
		}
	}
	if err := replicaRVs.Delete(ctx, "pvc-del", metav1.DeleteOptions{}); err == nil {
		t.Fatal("a replica pod deleted a ReplicatedVolume")
	}
	// An expansion: the node daemon grows the recorded size (every copy
	// follows); a replica pod may not, and nobody may shrink it.
	if err := patch("grow it", `{"spec":{"capacityBytes":4096}}`); err == nil || !strings.Contains(err.Error(), "only remove Ferry's finalizer") {
		t.Errorf("a replica pod grew a ReplicatedVolume: %v", err)
	}
	if err := s.RecordCapacity(ctx, "pvc-del", 8192); err != nil {
		t.Fatalf("the node daemon recording an expansion: %v", err)
	}
	if got, err := s.Get(ctx, "pvc-del"); err != nil || got.CapacityBytes != 8192 {
		t.Fatalf("after the expansion the state reads %d bytes, %v; want 8192", got.CapacityBytes, err)
	}
	// What says where the volume came from is immutable, even to an
	// administrator: nothing would read an edit.
	if _, err := admin.Patch(ctx, "pvc-del", types.MergePatchType, []byte(`{"spec":{"claimName":"other"}}`), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "are immutable") {
		t.Errorf("an administrator renamed the claim in the spec: %v", err)
	}
	nodeRVs := nodeDyn.Resource(rvapi.GVR)
	for _, r := range []struct{ what, patch, says string }{
		{"shrink it", `{"spec":{"capacityBytes":4096}}`, "never shrinks"},
		{"scale it while growing it", `{"spec":{"capacityBytes":16384,"replicationFactor":1}}`, "only remove Ferry's finalizer"},
	} {
		if _, err := nodeRVs.Patch(ctx, "pvc-del", types.MergePatchType, []byte(r.patch), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), r.says) {
			t.Errorf("the node daemon tried to %s: got %v, want a refusal saying %q", r.what, err, r.says)
		}
	}

	// A replica pod may not mark it for deletion.
	if err := patch("mark it", `{"metadata":{"annotations":{"ferry.zfs.csi.io/delete":"true"}}}`); err == nil || !strings.Contains(err.Error(), "only the node daemon marks") {
		t.Errorf("a replica pod marked a ReplicatedVolume for deletion: %v", err)
	}
	// A deletion without Ferry's mark (as the CRD's deletion does) makes
	// nobody destroy anything: the state is not Deleting.
	other := st
	other.Volume = "pvc-nomark"
	if _, err := s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := nodeDyn.Resource(rvapi.GVR).Delete(ctx, "pvc-nomark", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "pvc-nomark"); err != nil || got.Deleting {
		t.Fatalf("a ReplicatedVolume deleted without Ferry's mark reads %+v, %v; want it not Deleting", got, err)
	}

	// The node daemon deletes it: the finalizer holds it, Deleting.
	if err := s.Delete(ctx, "pvc-del"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, "pvc-del")
	if err != nil || !got.Deleting || len(got.Replicas) != 2 {
		t.Fatalf("after Delete: %+v, %v; want Deleting with both replicas", got, err)
	}
	// Each replica leaves, as a replica pod; the last one releases it.
	rs := rvstate.New(dynamic.NewForConfigOrDie(replicaCfg), nil)
	for _, n := range []replica.Node{"node-b", "node-a"} {
		if _, err := rs.Update(ctx, "pvc-del", func(s *replica.State) error {
			_, err := replica.Leave(s, n, replica.Holding{}, true)
			return err
		}); err != nil {
			t.Fatalf("%s leaving: %v", n, err)
		}
	}
	if _, err := admin.Get(ctx, "pvc-del", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the object outlived its last replica: %v", err)
	}
	if _, err := s.Get(ctx, "pvc-del"); err == nil || !strings.Contains(err.Error(), ports.ErrNotFound.Error()) {
		t.Fatalf("Get after the last replica left: %v, want ErrNotFound", err)
	}
}
