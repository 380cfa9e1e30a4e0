// Package nodeevents raises events on a Node, where an operator looks
// first (`kubectl describe node`, `kubectl get events`): a node daemon
// that cannot start yet says so there. Like the kubelet's own, each is a
// core/v1 Event in the default namespace whose object is the Node, with
// the node's name for its UID.
package nodeevents

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Controller names Ferry's daemon as the events' reporter.
const Controller = "ferry.zfs.csi.io/daemon"

// Recorder raises events on one node.
type Recorder struct {
	kube kubernetes.Interface
	node string
	now  func() time.Time
}

// New returns the recorder of node's events.
func New(kube kubernetes.Interface, node string) *Recorder {
	return &Recorder{kube: kube, node: node, now: time.Now}
}

// Record raises one event (warning or normal) on the node, within 10 s;
// an event that cannot be written is an error (the caller logged the
// same words already).
func (r *Recorder) Record(ctx context.Context, warning bool, reason, message string) error {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	if len(message) > 1024 {
		message = message[:1021] + "..."
	}
	now := metav1.NewTime(r.now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: r.node + ".", Namespace: metav1.NamespaceDefault},
		InvolvedObject:      corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: r.node, UID: types.UID(r.node)},
		Type:                typ,
		Reason:              reason,
		Message:             message,
		Source:              corev1.EventSource{Component: "ferry-daemon", Host: r.node},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: Controller,
		ReportingInstance:   r.node,
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := r.kube.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{})
	return err
}
