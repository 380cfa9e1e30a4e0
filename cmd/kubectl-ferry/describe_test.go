package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
)

func rvObject(name, claimNS, claim string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rvapi.APIVersion, "kind": rvapi.Kind,
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"volumeID": name, "replicationFactor": int64(2), "claimNamespace": claimNS, "claimName": claim,
			"persistentVolumeName": name, "snapshotInterval": "2s", "capacityBytes": int64(1 << 30)},
		"status": map[string]any{"phase": "Degraded", "readyReplicas": int64(1), "primary": "node1", "epoch": int64(3), "newest": "ferry-3-40",
			"replicas": []any{
				map[string]any{"node": "node1", "snapshot": int64(40), "snapshotEpoch": int64(3), "active": true, "ready": true},
				map[string]any{"node": "node2", "snapshot": int64(31), "snapshotEpoch": int64(3), "fetching": map[string]any{"snapshot": int64(40), "epoch": int64(3)}},
			}},
	}}
}

func TestAVolumeIsFoundByItsIDOrItsClaim(t *testing.T) {
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"},
		rvObject("pvc-a", "shop", "data"), rvObject("pvc-b", "blog", "data"))
	for _, c := range []struct{ arg, ns, want, err string }{
		{"pvc-a", "", "pvc-a", ""},
		{"shop/data", "", "pvc-a", ""},
		{"data", "blog", "pvc-b", ""},
		{"data", "", "", `no Ferry volume "data"`},
		{"shop/nothing", "", "", "no Ferry volume belongs to the claim shop/nothing"},
	} {
		rv, err := findVolume(context.Background(), dyn, c.arg, c.ns)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("findVolume(%q, %q): %v, want an error saying %q", c.arg, c.ns, err, c.err)
			}
			continue
		}
		if err != nil || rv.Name != c.want {
			t.Errorf("findVolume(%q, %q) = %s, %v; want %s", c.arg, c.ns, rv.Name, err, c.want)
		}
	}
}

func TestDescribeShowsTheCopiesLagTransferAndTheEventsOfTheVolumeAndItsClaim(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	label := rvapi.LabelVolume + "=" + rvapi.Hash(volume.ID("pvc-a"))
	k, v, _ := strings.Cut(label, "=")
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ferry-system", Labels: map[string]string{k: v},
			Annotations: map[string]string{"prometheus.io/port": "9809"}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	event := func(ns, kind, name, reason, msg string, ago time.Duration) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name + reason, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name, Namespace: ns}, Type: "Warning", Reason: reason, Message: msg, LastTimestamp: at(ago)}
	}
	kube := kubefake.NewClientset(pod("r1", "node1"), pod("r2", "node2"),
		event("default", rvapi.Kind, "pvc-a", "RolledBack", "replica on node2 rolled back", 3*time.Minute),
		event("shop", "PersistentVolumeClaim", "data", "RolledBack", "replica on node2 rolled back", 3*time.Minute), // the same, on the claim
		event("shop", "PersistentVolumeClaim", "data", "TookOver", "node2 took over", 10*time.Minute),
		event("shop", "PersistentVolumeClaim", "other", "TookOver", "not this claim", time.Minute))
	metrics := map[string]string{
		"node1": "ferry_replica_lag_seconds{node=\"node1\",volume=\"pvc-a\"} 0\nferry_transfer_running 0\n",
		"node2": "ferry_replica_lag_seconds{node=\"node2\",volume=\"pvc-a\"} 18.4\nferry_transfer_running 1\nferry_transfer_bytes 536870912\nferry_transfer_estimated_bytes 1073741824\n",
	}
	var rv rvapi.ReplicatedVolume
	b, _ := rvObject("pvc-a", "shop", "data").MarshalJSON()
	if err := json.Unmarshal(b, &rv); err != nil {
		t.Fatal(err)
	}
	d := describe(context.Background(), kube, rv, "ferry-system", func(_ context.Context, p corev1.Pod, port string) (string, error) {
		return metrics[p.Spec.NodeName], nil
	})
	var out bytes.Buffer
	if err := writeDescription(&out, d, now); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Claim:               shop/data", "Replication factor:  2", "Snapshot interval:   2s", "Phase:               Degraded (1 ready)",
		"Primary:             node1 (epoch 3)",
		"node1  primary    ferry-3-40  true   0s",
		"node2  secondary  ferry-3-31  false  18s  [##########..........]  50% 512.0 MiB of 1.0 GiB",
		"10m0s  Warning  TookOver    node2 took over",
		"3m0s   Warning  RolledBack  replica on node2 rolled back",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Count(got, "rolled back") != 1 || strings.Contains(got, "not this claim") {
		t.Errorf("an event twice, or another claim's:\n%s", got)
	}
	if strings.Index(got, "TookOver") > strings.Index(got, "RolledBack") {
		t.Errorf("events not oldest first:\n%s", got)
	}
}
