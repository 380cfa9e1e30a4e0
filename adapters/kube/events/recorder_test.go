package events_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/adapters/kube/events"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/ports"
)

var ctx = context.Background()

func rv(name, volumeID, uid, claimNS, claim string) *unstructured.Unstructured {
	spec := map[string]any{"volumeID": volumeID, "replicationFactor": int64(2)}
	if claim != "" {
		spec["claimNamespace"], spec["claimName"] = claimNS, claim
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rvapi.APIVersion, "kind": rvapi.Kind,
		"metadata": map[string]any{"name": name, "uid": uid},
		"spec":     spec,
	}}
}

func newDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"}, objs...)
}

// eventsOn lists the Events whose involvedObject has uid, in every
// namespace, waiting for at least n of them (the broadcaster writes in the
// background): listed again on every Event the fake server reports.
func eventsOn(t *testing.T, kube *kubefake.Clientset, uid string, n int) []corev1.Event {
	t.Helper()
	w, err := kube.CoreV1().Events("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		l, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []corev1.Event
		for _, e := range l.Items {
			if string(e.InvolvedObject.UID) == uid {
				got = append(got, e)
			}
		}
		if len(got) >= n {
			return got
		}
		select {
		case <-w.ResultChan():
		case <-deadline.C:
			return got
		}
	}
}

// An event of a volume lands on its ReplicatedVolume (cluster-scoped: in
// namespace default, involvedObject without namespace, with its UID) and
// on its claim, from component "ferry", and is logged as well.
func TestAnEventLandsOnTheReplicatedVolumeAndItsClaimAndInTheLog(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "pvc-uid"}}
	kube := kubefake.NewClientset(pvc)
	core, logs := observer.New(zapcore.DebugLevel)
	r := events.New(kube, newDynamic(rv("pvc-1", "pvc-1", "rv-uid", "shop", "orders")), zap.New(core), events.Options{Host: "node-a", Claims: true})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	r.Record(ctx, "pvc-1", ports.Event{Type: ports.EventWarning, Reason: "Diverged", Message: "node-b diverged"})

	onRV := eventsOn(t, kube, "rv-uid", 1)
	if len(onRV) != 1 {
		t.Fatalf("events on the ReplicatedVolume: %+v, want one", onRV)
	}
	e := onRV[0]
	if e.Namespace != "default" || e.InvolvedObject.Namespace != "" || e.InvolvedObject.Kind != rvapi.Kind || e.InvolvedObject.APIVersion != rvapi.APIVersion ||
		e.InvolvedObject.Name != "pvc-1" || e.Type != "Warning" || e.Reason != "Diverged" || e.Message != "node-b diverged" ||
		e.Source.Component != "ferry" || e.Source.Host != "node-a" {
		t.Errorf("event on the ReplicatedVolume: %+v", e)
	}
	onClaim := eventsOn(t, kube, "pvc-uid", 1)
	if len(onClaim) != 1 || onClaim[0].Namespace != "shop" || onClaim[0].InvolvedObject.Kind != "PersistentVolumeClaim" ||
		onClaim[0].InvolvedObject.Name != "orders" || onClaim[0].Reason != "Diverged" {
		t.Errorf("events on the claim: %+v, want one Diverged in namespace shop", onClaim)
	}
	if n := logs.FilterMessage("event").FilterField(zap.String("reason", "Diverged")).Len(); n != 1 {
		t.Errorf("the event was logged %d times, want once", n)
	}
}

// A recorder that may not read claims (the volume manager's) raises events
// on the ReplicatedVolume alone and never asks for the claim; a volume
// without a ReplicatedVolume gets a log line only.
func TestWithoutClaimsOnlyTheReplicatedVolumeAndWithoutItOnlyTheLog(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", UID: "pvc-uid"}}
	kube := kubefake.NewClientset(pvc)
	core, logs := observer.New(zapcore.DebugLevel)
	r := events.New(kube, newDynamic(rv("pvc-1", "pvc-1", "rv-uid", "shop", "orders")), zap.New(core), events.Options{})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	r.Record(ctx, "pvc-gone", ports.Event{Type: ports.EventNormal, Reason: "Left", Message: "no object"})
	r.Record(ctx, "pvc-1", ports.Event{Type: ports.EventNormal, Reason: "Snapshotted", Message: "ferry-1-1"})
	if got := eventsOn(t, kube, "rv-uid", 1); len(got) != 1 || got[0].Reason != "Snapshotted" {
		t.Fatalf("events on the ReplicatedVolume: %+v", got)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := kube.CoreV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if e.InvolvedObject.UID != "rv-uid" {
			t.Errorf("unexpected event %s on %+v", e.Reason, e.InvolvedObject)
		}
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "persistentvolumeclaims" {
			t.Errorf("a recorder without Claims asked for the claim: %v", a)
		}
	}
	if logs.FilterMessage("event").FilterField(zap.String("reason", "Left")).Len() != 1 ||
		logs.FilterMessage("event not raised: the volume has no ReplicatedVolume").Len() != 1 {
		t.Errorf("the event of a volume without ReplicatedVolume was not logged (only): %v", logs.All())
	}
}

// Record never waits for the API server: with the worker stuck on a GET
// that does not answer, every Record returns at once, events beyond the
// queue are dropped with a log line each, and every event is logged.
func TestRecordNeverBlocksAndDropsBeyondTheQueueWithALogLine(t *testing.T) {
	dyn := newDynamic(rv("pvc-1", "pvc-1", "rv-uid", "", ""))
	release := make(chan struct{})
	dyn.PrependReactor("get", "replicatedvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	kube := kubefake.NewClientset()
	core, logs := observer.New(zapcore.DebugLevel)
	const queue, n = 4, 20
	r := events.New(kube, dyn, zap.New(core), events.Options{Queue: queue})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	for i := range n {
		r.Record(ctx, "pvc-1", ports.Event{Type: ports.EventNormal, Reason: "Tick", Message: fmt.Sprint(i)})
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("%d Records took %s with the API server hung", n, d)
	}
	// The worker holds at most one, the queue the next ones.
	if dropped := logs.FilterMessage("event dropped: queue full").Len(); dropped < n-queue-1 || dropped > n-queue {
		t.Errorf("%d events dropped, want %d or %d", dropped, n-queue-1, n-queue)
	}
	if logged := logs.FilterMessage("event").Len(); logged != n {
		t.Errorf("%d events logged, want all %d", logged, n)
	}
	close(release)
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// After Stop, Record still logs and returns.
	r.Record(ctx, "pvc-1", ports.Event{Type: ports.EventNormal, Reason: "Late", Message: "after stop"})
	if logs.FilterMessage("event").FilterField(zap.String("reason", "Late")).Len() != 1 {
		t.Error("an event after Stop was not logged")
	}
}

// A message longer than the API accepts is cut, not refused.
func TestALongMessageIsCut(t *testing.T) {
	kube := kubefake.NewClientset()
	r := events.New(kube, newDynamic(rv("pvc-1", "pvc-1", "rv-uid", "", "")), zap.NewNop(), events.Options{})
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(ctx)
	r.Record(ctx, "pvc-1", ports.Event{Type: ports.EventWarning, Reason: "Failed", Message: strings.Repeat("é", 2000)})
	got := eventsOn(t, kube, "rv-uid", 1)
	if len(got) != 1 || len(got[0].Message) > 1024 || !strings.HasSuffix(got[0].Message, "...") || !strings.HasPrefix(got[0].Message, "éé") {
		t.Fatalf("events %+v: want one message of at most 1024 bytes ending in ...", got)
	}
}
