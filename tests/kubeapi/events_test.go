//go:build apiserver

package kubeapi_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	kubeevents "github.com/ferry-csi/ferry/adapters/kube/events"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// describedEvents lists the Events `kubectl describe` shows for an object:
// kubectl searches the object's namespace (every namespace for a
// cluster-scoped one) by involvedObject name, namespace, kind and uid.
func describedEvents(ctx context.Context, kube kubernetes.Interface, ns, name, kind, uid, reason string) ([]corev1.Event, error) {
	sel := kube.CoreV1().Events(ns).GetFieldSelector(&name, &ns, &kind, &uid)
	l, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range l.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

// An event of a volume reaches the API server as an Event that `kubectl
// describe rv` and `kubectl describe pvc` find (matched by uid); a volume
// without a ReplicatedVolume gets none (its event is a log line).
func TestAVolumesEventIsDescribedOnItsReplicatedVolumeAndItsClaim(t *testing.T) {
	cfg := start(t)
	node := asNode(cfg)
	dyn := dynamic.NewForConfigOrDie(node)
	kube := kubernetes.NewForConfigOrDie(node)
	admin := kubernetes.NewForConfigOrDie(cfg)
	deleteAll(t, dyn)
	ctx := context.Background()

	const ns = "events-shop"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pvc, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "orders"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "orders", metav1.DeleteOptions{}) })
	st := replica.State{Volume: "pvc-events", ReplicationFactor: 2, Epoch: 1, Primary: "node-a", Replicas: []replica.Replica{{Node: "node-a", Active: true}}}
	if _, err := rvstate.New(dyn, nil).CreateWithSpec(ctx, st, ports.VolumeSpec{ClaimNamespace: ns, ClaimName: "orders"}); err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(rvapi.GVR).Get(ctx, "pvc-events", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	r := kubeevents.New(kube, dyn, zap.NewNop(), kubeevents.Options{Host: "node-a", Claims: true})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	// The worker raises in order: once the second is on the server, the
	// first has been dealt with.
	r.Record(ctx, "pvc-nothing", ports.Event{Type: ports.EventWarning, Reason: "NoObject", Message: "no ReplicatedVolume"})
	r.Record(ctx, "pvc-events", ports.Event{Type: ports.EventNormal, Reason: "ReplicasRequested", Message: "replicated volume: 2 copies"})

	// Look again on every Event the server reports; give up after a quiet
	// spell.
	w, err := admin.CoreV1().Events("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var onRV, onClaim []corev1.Event
	quiet := 30 * time.Second
	deadline := time.NewTimer(quiet)
	defer deadline.Stop()
	for first := true; len(onRV) == 0 || len(onClaim) == 0; first = false {
		if !first {
			select {
			case <-w.ResultChan():
			case <-deadline.C:
				t.Fatalf("after %s without progress: events on the ReplicatedVolume %v, on the claim %v", quiet, onRV, onClaim)
			}
		}
		before := len(onRV) + len(onClaim)
		if onRV, err = describedEvents(ctx, admin, "", "pvc-events", rvapi.Kind, string(u.GetUID()), "ReplicasRequested"); err != nil {
			t.Fatal(err)
		}
		if onClaim, err = describedEvents(ctx, admin, ns, "orders", "PersistentVolumeClaim", string(pvc.UID), "ReplicasRequested"); err != nil {
			t.Fatal(err)
		}
		if len(onRV)+len(onClaim) > before {
			deadline.Reset(quiet)
		}
	}
	if e := onRV[0]; len(onRV) != 1 || e.Namespace != "default" || e.Type != "Normal" || e.Message != "replicated volume: 2 copies" ||
		e.Source.Component != "ferry" || e.InvolvedObject.APIVersion != rvapi.APIVersion {
		t.Errorf("events on the ReplicatedVolume: %+v", onRV)
	}
	if e := onClaim[0]; len(onClaim) != 1 || e.Namespace != ns || e.Message != "replicated volume: 2 copies" {
		t.Errorf("events on the claim: %+v", onClaim)
	}
	all, err := admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=NoObject"})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Items) != 0 {
		t.Errorf("a volume without ReplicatedVolume got events: %+v", all.Items)
	}
}
