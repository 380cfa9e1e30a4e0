package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/ferry-csi/ferry/adapters/metrics"
)

func fencedFixture(t *testing.T) (fencedEnv, *[][]string) {
	t.Helper()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/component": "node"}}
	objs := []runtime.Object{&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: daemonSet, Namespace: "ferry-system"}, Spec: appsv1.DaemonSetSpec{Selector: sel}}}
	for _, n := range []string{"node1", "node2", "node3"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ferry-node-" + n, Namespace: "ferry-system", Labels: sel.MatchLabels},
			Spec: corev1.PodSpec{NodeName: n}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	lists := map[string]string{
		"node1": `[{"name":"tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7","volume":"pvc-a","bytes":1048576,"taken":"2026-11-27T11:00:00Z","inspect":"zfs set mountpoint=<dir> tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7 (read-only)","drop":"zfs release ferry-fenced ...; zfs destroy -r ...","root":"tank/ferry-fenced"}]`,
		"node2": `[]`,
	}
	var ran [][]string
	env := fencedEnv{kube: kubefake.NewClientset(objs...), ns: "ferry-system",
		get: func(_ context.Context, p corev1.Pod, port, path string) ([]byte, error) {
			if port != "9808" || path != "kept" {
				return nil, errors.New("wrong endpoint " + port + "/" + path)
			}
			l, ok := lists[p.Spec.NodeName]
			if !ok {
				return nil, errors.New("connection refused")
			}
			return []byte(l), nil
		},
		exec: func(_ context.Context, p corev1.Pod, container string, argv []string) (string, error) {
			if p.Spec.NodeName != "node1" || container != "ferry" {
				return "", errors.New("exec in the wrong place")
			}
			ran = append(ran, argv)
			return "", nil
		}}
	return env, &ran
}

func TestFencedListsEveryNodesKeptCopies(t *testing.T) {
	env, _ := fencedFixture(t)
	nodes, err := env.listKept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeKept(&out, nodes, time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	got := out.String()
	for _, want := range []string{"node1  pvc-a   1.0 MiB  1h0m0s ago  tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7", "Not read: node3 (connection refused)"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	out.Reset()
	if err := inspect(nodes, "node1", "tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7", &out); err != nil || !strings.Contains(out.String(), "zfs set mountpoint=<dir>") {
		t.Errorf("inspect: %v\n%s", err, out.String())
	}
}

func TestDroppingAKeptCopyTakesItsNameTypedBack(t *testing.T) {
	env, ran := fencedFixture(t)
	nodes, err := env.listKept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	name := "tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7"
	var out bytes.Buffer
	// Not confirmed: nothing runs.
	if err := env.drop(context.Background(), nodes, "node1", name, false, strings.NewReader("yes\n"), &out); err == nil || len(*ran) != 0 {
		t.Fatalf("drop confirmed with \"yes\": %v, ran %v", err, *ran)
	}
	// Only a copy the node lists, on that node.
	for _, c := range []struct{ node, name string }{{"node2", name}, {"node1", "tank/ferry/pvc-a@ferry-3-9"}, {"node1", "-r tank"}, {"node9", name}} {
		if err := env.drop(context.Background(), nodes, c.node, c.name, true, nil, &out); err == nil || len(*ran) != 0 {
			t.Errorf("drop %s %q: %v, ran %v; want refused, nothing run", c.node, c.name, err, *ran)
		}
	}
	if err := env.drop(context.Background(), nodes, "node1", name, false, strings.NewReader(name+"\n"), &out); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"zfs", "release", "ferry-fenced", name}, {"zfs", "destroy", "-r", "tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7"}}
	if len(*ran) != 2 || strings.Join((*ran)[0], " ") != strings.Join(want[0], " ") || strings.Join((*ran)[1], " ") != strings.Join(want[1], " ") {
		t.Errorf("ran %q, want %q", *ran, want)
	}
}

// A listing is the daemon's word: the drop destroys only a dataset directly
// below the kept root, named as Ferry keeps copies.
func TestOnlyACopyBelowTheKeptRootIsEverDropped(t *testing.T) {
	root := "tank/ferry-fenced"
	good := metrics.KeptCopyJSON{Name: root + "/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7", Root: root}
	if d, err := keptDataset(good); err != nil || d != root+"/pvc-a-fenced-e3-ferry-2-7" {
		t.Fatalf("keptDataset(%q) = %q, %v", good.Name, d, err)
	}
	for _, c := range []metrics.KeptCopyJSON{
		{Name: "tank@x", Root: root},
		{Name: "tank/ferry@ferry-3-9", Root: root},
		{Name: root + "@a@b", Root: root},
		{Name: root + "/pvc-a-k1@k2", Root: root},            // not <volume>-<name>@<name>
		{Name: root + "/x/pvc-a-k1@k1", Root: root},          // not directly below
		{Name: "tank/ferry/pvc-a-k1@k1", Root: "tank/ferry"}, // a root that is not a kept root
		{Name: root + "/pvc-a-k1\x1b[2J@k1", Root: root},
		{Name: root + "/pvc-a-k1@k1", Root: ""},
	} {
		if d, err := keptDataset(c); err == nil {
			t.Errorf("keptDataset(%q in %q) = %q, want refused", c.Name, c.Root, d)
		}
	}
	if got := printable("a\x1b[2Jb\tc\u009bd"); got != "a[2Jb\tcd" {
		t.Errorf("printable = %q", got)
	}
}

// A drop that failed at the destroy (the hold already released) can be
// run again.
func TestADropRetriedAfterItsReleaseSucceeds(t *testing.T) {
	env, ran := fencedFixture(t)
	nodes, err := env.listKept(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	exec := env.exec
	env.exec = func(ctx context.Context, p corev1.Pod, container string, argv []string) (string, error) {
		if argv[1] == "release" {
			*ran = append(*ran, argv)
			return "cannot release hold from snapshot '...': no such tag on this dataset", errors.New("exit status 1")
		}
		return exec(ctx, p, container, argv)
	}
	name := "tank/ferry-fenced/pvc-a-fenced-e3-ferry-2-7@fenced-e3-ferry-2-7"
	if err := env.drop(context.Background(), nodes, "node1", name, true, nil, &bytes.Buffer{}); err != nil {
		t.Fatalf("drop again: %v", err)
	}
	if len(*ran) != 2 || (*ran)[1][1] != "destroy" {
		t.Errorf("ran %q, want the release then the destroy", *ran)
	}
}
