package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

func TestTheStatusPageShowsVolumesCopiesTransfersAndWhatHappened(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	a := rvapi.ReplicatedVolume{}
	a.Name = "pvc-a"
	a.Spec = rvapi.Spec{ReplicationFactor: 2, ClaimNamespace: "shop", ClaimName: "<script>alert(1)</script>"}
	a.Status = rvapi.Status{Phase: "Degraded", ReadyReplicas: 1, Primary: "node1", Newest: "ferry-1-40",
		Replicas: []rvapi.ReplicaStatus{{Node: "node1", Snapshot: 40, SnapshotEpoch: 1, Active: true, Ready: true}, {Node: "node2", Snapshot: 37, SnapshotEpoch: 1}}}
	lag := 12.2
	rows := []volumeRow{{rv: a, lag: &lag, transfers: map[string]transfer{"node2": {Bytes: 256 << 20, Estimated: 1 << 30, ETA: 30 * time.Second}}}}
	events := []corev1.Event{
		{InvolvedObject: corev1.ObjectReference{Name: "pvc-a"}, Type: "Warning", Reason: "TookOver", Message: "node1 took over from node3", LastTimestamp: metav1.NewTime(now.Add(-5 * time.Minute))},
		{InvolvedObject: corev1.ObjectReference{Name: "pvc-a"}, Type: "Normal", Reason: "SnapshotTaken", Message: "not notable"},
	}
	var out bytes.Buffer
	if err := renderPage(&out, pageOf(rows, events, []string{"a warning"}, now)); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		`data-volume="pvc-a"`, `<span class="badge warn">Degraded</span>`, "1 / 2", "12s",
		`<div class="copy primary">`, `<div class="copy notready">`, `style="width: 25%"`, "25% of 1.0 GiB, 30s left",
		"5m0s ago", "TookOver", "node1 took over from node3", "a warning",
		"shop/&lt;script&gt;alert(1)&lt;/script&gt;",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(got, "<script>") || strings.Contains(got, "not notable") {
		t.Errorf("a claim's name unescaped, or an event that is not notable:\n%s", got)
	}
}

func TestTheStatusPageIsServedFromTheCluster(t *testing.T) {
	rv := rvObject("pvc-a", "shop", "data")
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"}, rv)
	kube := kubefake.NewClientset(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: rvapi.Kind, Name: "pvc-a"}, Type: "Warning", Reason: "Fenced", Message: "fenced on node1"})
	srv := httptest.NewServer(dashboardHandler(kube, dyn, "ferry-system", time.Now))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `data-volume="pvc-a"`) || !strings.Contains(string(body), "fenced on node1") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /: %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	if resp, err := http.Post(srv.URL+"/", "text/plain", nil); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %v %v, want 405", resp, err)
	}
	if resp, err := http.Get(srv.URL + "/elsewhere"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /elsewhere: %v %v, want 404", resp, err)
	}
}

func TestTheStatusPageIsServedOnLoopbackUnlessToldOtherwise(t *testing.T) {
	h := http.NotFoundHandler()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		if err := serveDashboard(context.Background(), addr, false, h, io.Discard); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("--listen %s without --public: %v", addr, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	done := make(chan error)
	go func() { done <- serveDashboard(ctx, "127.0.0.1:0", false, h, w) }()
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(r).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, r)
	}()
	var said string
	select {
	case said = <-line:
	case <-time.After(10 * time.Second):
		t.Fatal("no address said in 10 s")
	}
	cancel()
	if err := <-done; err != nil || !strings.Contains(said, "http://127.0.0.1:") {
		t.Errorf("serving on loopback: %v, %q", err, said)
	}
	_ = w.Close()
}
