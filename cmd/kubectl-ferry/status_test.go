package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

func TestStatusShowsEachVolumesClaimCopiesAndTransfers(t *testing.T) {
	a := rvapi.ReplicatedVolume{}
	a.Name = "pvc-a"
	a.Spec = rvapi.Spec{ReplicationFactor: 2, ClaimNamespace: "shop", ClaimName: "data-db-0"}
	a.Status = rvapi.Status{Phase: "Available", ReadyReplicas: 1, Primary: "node1", Newest: "ferry-1-40", MaxLag: 3,
		Replicas: []rvapi.ReplicaStatus{{Node: "node1", Snapshot: 40, Active: true, Ready: true}, {Node: "node2", Snapshot: 37}}}
	b := rvapi.ReplicatedVolume{}
	b.Name = "pvc-b"
	b.Spec = rvapi.Spec{ReplicationFactor: 3}
	var out bytes.Buffer
	lag := 7.6
	rows := []volumeRow{
		{rv: b},
		{rv: a, transfers: map[string]transfer{"node2": {Bytes: 512 << 20, Estimated: 1 << 30, ETA: 12 * time.Second}}, lag: &lag},
	}
	if err := writeStatus(&out, rows); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	lines := strings.Split(got, "\n")
	for _, want := range []string{"VOLUME", "CLAIM", "COPIES", "MAX LAG"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %s", lines[0], want)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[0] != "pvc-a" || f[1] != "shop/data-db-0" || f[4] != "node1" || f[5] != "node1:40*,node2:37!" || f[6] != "ferry-1-40" || f[7] != "3" || f[9] != "8s" {
		t.Errorf("pvc-a's line: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 9 || f[0] != "pvc-b" || f[1] != "-" || f[5] != "-" || f[len(f)-1] != "-" {
		t.Errorf("pvc-b's line (no claim, no copies yet): %q", lines[2])
	}
	if !strings.Contains(got, "pvc-a on node2  [##########..........]  50% 512.0 MiB of 1.0 GiB, 12s left") {
		t.Errorf("no transfer bar in:\n%s", got)
	}
}

func TestATransferIsReadFromTheVolumeManagersMetrics(t *testing.T) {
	metrics := `# HELP ferry_transfer_running 1 while ...
# TYPE ferry_transfer_running gauge
ferry_transfer_running{node="node2",volume="pvc-a"} 1
ferry_transfer_bytes{node="node2",volume="pvc-a"} 1.048576e+06
ferry_transfer_estimated_bytes{node="node2",volume="pvc-a"} 4.194304e+06
ferry_transfer_eta_seconds{node="node2",volume="pvc-a"} 6.5
ferry_replica_snapshot{node="node2",volume="pvc-a"} 12
`
	tr, ok := transferOf(parseMetrics(metrics))
	if !ok || tr.Bytes != 1<<20 || tr.Estimated != 4<<20 || tr.ETA != 6500*time.Millisecond {
		t.Errorf("transfer %+v %v", tr, ok)
	}
	if _, ok := transferOf(parseMetrics(strings.Replace(metrics, `"pvc-a"} 1`+"\n", `"pvc-a"} 0`+"\n", 1))); ok {
		t.Error("a transfer read where ferry_transfer_running is 0")
	}
}

func TestAProgressBarWithoutAnEstimateSaysWhatMoved(t *testing.T) {
	if got := progress(transfer{Bytes: 3 << 20}); !strings.Contains(got, "3.0 MiB moved") {
		t.Errorf("progress without estimate: %q", got)
	}
	if got := progress(transfer{Bytes: 5, Estimated: 4}); !strings.Contains(got, "100%") {
		t.Errorf("progress past the estimate: %q", got)
	}
}

func TestUnknownSubcommandsAreRefused(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"explode"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage") {
		t.Errorf("an unknown subcommand: exit %d, %q", code, errOut.String())
	}
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "kubectl-ferry") {
		t.Errorf("version: exit %d, %q", code, out.String())
	}
}

// Without the permission to list Ferry's pods, the status still lists
// every volume, and says why transfers are missing.
func TestStatusListsTheVolumesWhenThePodsCannotBeRead(t *testing.T) {
	rv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rvapi.APIVersion, "kind": rvapi.Kind,
		"metadata": map[string]any{"name": "pvc-a"},
		"spec":     map[string]any{"volumeID": "pvc-a", "replicationFactor": int64(2), "claimNamespace": "shop", "claimName": "data"},
		"status":   map[string]any{"primary": "node1", "replicas": []any{map[string]any{"node": "node1", "snapshot": int64(4), "active": true}}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"}, rv)
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New(`pods is forbidden: User "dev" cannot list resource "pods"`)
	})
	rows, warnings, err := status(context.Background(), kube, dyn, "ferry-system")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].rv.Spec.ClaimName != "data" || rows[0].rv.Status.Primary != "node1" {
		t.Errorf("rows %+v", rows)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "forbidden") {
		t.Errorf("warnings %q, want one saying the pods could not be listed and why", warnings)
	}
}
