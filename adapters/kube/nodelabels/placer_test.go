package nodelabels

import (
	"context"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/domain/volume"
)

func TestChanges(t *testing.T) {
	current := map[string]string{
		"kubernetes.io/hostname":              "a",
		"replica.ferry.zfs.csi.io/pvc-keep":   "ready",
		"replica.ferry.zfs.csi.io/pvc-gone":   "ready",
		"replica.ferry.zfs.csi.io/pvc-flaky":  "ready",
		"replica.ferry.zfs.csi.io/pvc-wrong":  "yes",
		"other.example.com/replica.ferry.zfs": "x",
	}
	got := Changes(current, []volume.ID{"pvc-keep", "pvc-new", "pvc-wrong"}, []volume.ID{"pvc-flaky"})
	want := map[string]any{
		"replica.ferry.zfs.csi.io/pvc-new":   "ready",
		"replica.ferry.zfs.csi.io/pvc-wrong": "ready",
		"replica.ferry.zfs.csi.io/pvc-gone":  nil,
	}
	if !maps.Equal(got, want) {
		t.Fatalf("Changes = %v, want %v", got, want)
	}
	if got := Changes(map[string]string{"replica.ferry.zfs.csi.io/pvc-keep": "ready"}, []volume.ID{"pvc-keep"}, nil); len(got) != 0 {
		t.Fatalf("nothing to change, got %v", got)
	}
}

// Nothing is written when the labels already say it: in steady state the
// daemon reads its node and never patches.
func TestPlaceWritesOnlyWhatDiffers(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"kubernetes.io/hostname": "a"}}})
	p := New(client)
	ctx := context.Background()
	for range 3 {
		if err := p.Place(ctx, "a", []volume.ID{"pvc-1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	patches := 0
	for _, a := range client.Actions() {
		if _, ok := a.(k8stesting.PatchAction); ok {
			patches++
		}
	}
	if patches != 1 {
		t.Fatalf("%d patches for one change, want 1", patches)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{})
	if n.Labels["replica.ferry.zfs.csi.io/pvc-1"] != "ready" || n.Labels["kubernetes.io/hostname"] != "a" {
		t.Fatalf("labels %v", n.Labels)
	}
}
