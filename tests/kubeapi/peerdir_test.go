//go:build apiserver

package kubeapi_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/peerdir"
	"github.com/ferry-csi/ferry/ports"
)

// A daemon's published address is what volume managers resolve, on the
// real API server; a Lease held by another node is not taken over.
func TestNodeLeasesPublishPeerAddresses(t *testing.T) {
	cfg := start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := peerdir.NewPublisher(kube, "ferry-system", "node-l", "10.9.0.3:7443").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := peerdir.NewPublisher(kube, "ferry-system", "node-l", "10.9.0.4:7443").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	r := peerdir.NewResolver(kube, "ferry-system", 0)
	if addr, err := r.Resolve("node-l"); err != nil || addr != "10.9.0.4:7443" {
		t.Fatalf("Resolve = %q, %v", addr, err)
	}
	l, err := kube.CoordinationV1().Leases("ferry-system").Get(ctx, peerdir.LeaseName("node-l"), metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "node-l" {
		t.Fatalf("lease %+v, %v", l, err)
	}
	other := "node-x"
	l.Spec.HolderIdentity = &other
	if _, err := kube.CoordinationV1().Leases("ferry-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := peerdir.NewPublisher(kube, "ferry-system", "node-l", "10.9.0.5:7443").Publish(ctx); !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("publishing over another holder's lease: %v, want ErrConflict", err)
	}
	if _, err := r.Resolve("node-l"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a lease held by another node resolved: %v", err)
	}
}

// Every accepted renewal changes the lease's value as every observer reads
// it, and costs one write once the first has been made.
func TestEveryRenewalChangesTheLeaseAsObserversReadIt(t *testing.T) {
	cfg := start(t)
	kube := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := peerdir.NewPublisher(kube, "ferry-system", "node-r", "10.9.0.7:7443")
	leases := peerdir.NewLeases(kube, "ferry-system")
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		if err := p.Renew(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := leases.Leases(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec, ok := got["node-r"]
		if !ok || rec.PeerAddress != "10.9.0.7:7443" || rec.Value == "" || seen[rec.Value] {
			t.Fatalf("renewal %d: %+v (seen %v)", i, got, seen)
		}
		seen[rec.Value] = true
	}
}
