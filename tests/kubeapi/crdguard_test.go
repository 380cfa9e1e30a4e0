//go:build apiserver

package kubeapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// deploy/crds/admission-crd-guard.yaml on the real API server: the
// ReplicatedVolume CRD's deletion (which deletes every ReplicatedVolume)
// is refused until an administrator confirms it on the object.
func TestTheCRDIsDeletedOnlyOnceTheUninstallIsConfirmed(t *testing.T) {
	cfg := start(t)
	ctx := context.Background()
	createPolicy(t, kubernetes.NewForConfigOrDie(cfg), "../../deploy/crds/admission-crd-guard.yaml")
	crds := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	const name = "replicatedvolumes.ferry.zfs.csi.io"
	if _, err := crds.Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the test server has no ReplicatedVolume CRD: %v", err)
	}
	// Policies take effect shortly after they are created: wait for the
	// first refusal (a dry run deletes nothing meanwhile).
	deadline := time.After(time.Minute)
	poll := time.NewTicker(200 * time.Millisecond)
	defer poll.Stop()
	for {
		err := crds.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "ferry.zfs.csi.io/uninstall=confirmed") {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("the guard never refused the CRD's deletion: %v", err)
		case <-poll.C:
		}
	}
	if _, err := crds.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"ferry.zfs.csi.io/uninstall":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := crds.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Fatal("the CRD's deletion passed with a confirmation other than \"confirmed\"")
	}
	if _, err := crds.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"ferry.zfs.csi.io/uninstall":"confirmed"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := crds.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the confirmed deletion was refused: %v", err)
	}
}
