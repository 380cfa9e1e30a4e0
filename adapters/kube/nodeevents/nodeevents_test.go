package nodeevents

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// An event lands where `kubectl describe node` finds it: in the default
// namespace, about the Node, with the node's name as its UID.
func TestAnEventIsRaisedOnTheNode(t *testing.T) {
	c := fake.NewClientset()
	if err := New(c, "node-a").Record(context.Background(), true, "FerryPoolMissing", "the daemon waits for pool tank"); err != nil {
		t.Fatal(err)
	}
	list, _ := c.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Fatalf("%d events", len(list.Items))
	}
	e := list.Items[0]
	if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "node-a" || string(e.InvolvedObject.UID) != "node-a" ||
		e.Type != corev1.EventTypeWarning || e.Reason != "FerryPoolMissing" || e.ReportingController != Controller {
		t.Errorf("event %+v", e)
	}
}
