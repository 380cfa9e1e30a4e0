//go:build apiserver

package kubeapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ferry-csi/ferry/adapters/kube/lostnode"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
)

// deploy/admission-pod-deletions.yaml on the real API server: the node
// daemon of node-a deletes pods on its own node, and on node-b only while
// node-b is listed fenced (as the lostnode adapter's Taint lists it), and
// only pods using a claim or Ferry's replica pods; on a node neither its
// own nor fenced, nothing.
func TestTheNodeDaemonDeletesPodsOnlyOnItsNodeOrAFencedOne(t *testing.T) {
	cfg := start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"ferry-system", "app-pd"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().ConfigMaps("ferry-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lostnode.FencedNodes}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-pd-b"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	claim := []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	pod := func(ns, name, node string, vols []corev1.Volume, labels map[string]string) {
		no := false
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}, Spec: corev1.PodSpec{
			NodeName: node, Volumes: vols, AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("app-pd", "own", "node-pd-a", claim, nil)
	pod("app-pd", "lost", "node-pd-b", claim, nil)
	pod("app-pd", "lost-no-claim", "node-pd-b", nil, nil)
	pod("app-pd", "lost-ephemeral", "node-pd-b", []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
		VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}}}}}, nil)
	pod("app-pd", "elsewhere", "node-pd-c", claim, nil)
	pod("ferry-system", "replica-lost", "node-pd-b", nil, map[string]string{rvapi.LabelVolume: "h"})
	createPolicy(t, admin, "../../deploy/admission-pod-deletions.yaml")

	daemonCfg := rest.CopyConfig(cfg)
	daemonCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ferry-system:ferry-node",
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"node-pd-a"}}}
	daemon := kubernetes.NewForConfigOrDie(daemonCfg)
	del := func(ns, name string) error {
		return daemon.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}
	// Policies take effect shortly after they are created.
	waitUntil(t, "the policy refuses a deletion on another node", time.Minute, func() (bool, string) {
		err := del("app-pd", "elsewhere")
		return err != nil && strings.Contains(err.Error(), "only on its own node or on a node it fenced"), fmt.Sprint(err)
	})
	check := func(when string, want map[string]string) {
		t.Helper()
		for who, says := range want {
			ns, name, _ := strings.Cut(who, "/")
			err := del(ns, name)
			switch {
			case says == "" && err != nil:
				t.Errorf("%s: deleting %s refused: %v", when, who, err)
			case says != "" && (err == nil || !strings.Contains(err.Error(), says)):
				t.Errorf("%s: deleting %s: %v, want a refusal saying %q", when, who, err, says)
			}
		}
	}
	notFenced, noClaim := "only on its own node or on a node it fenced", "only pods that use a claim"
	check("node-pd-b not fenced", map[string]string{
		"app-pd/own": "", "app-pd/lost": notFenced, "ferry-system/replica-lost": notFenced, "app-pd/elsewhere": notFenced})
	effects := lostnode.New(daemon, "ferry.zfs.csi.io", "ferry-system")
	if err := effects.Taint(ctx, "node-pd-b", true); err != nil {
		t.Fatal(err)
	}
	// The policy reads its parameter from an informer: wait for it.
	waitUntil(t, "the policy sees node-pd-b fenced", 30*time.Second, func() (bool, string) {
		err := del("app-pd", "lost")
		return err == nil, fmt.Sprint(err)
	})
	check("node-pd-b fenced", map[string]string{
		"app-pd/own": "", "app-pd/lost": "", "app-pd/lost-ephemeral": "", "ferry-system/replica-lost": "", "app-pd/lost-no-claim": noClaim, "app-pd/elsewhere": notFenced})
	if err := effects.Taint(ctx, "node-pd-b", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the policy sees node-pd-b's fence lifted", 30*time.Second, func() (bool, string) {
		return del("app-pd", "lost") != nil, ""
	})
	check("node-pd-b's fence lifted", map[string]string{"app-pd/lost": notFenced})
	// The list deleted by hand: the daemon makes it again, with the node
	// it fences.
	if err := admin.CoreV1().ConfigMaps("ferry-system").Delete(ctx, lostnode.FencedNodes, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := effects.Taint(ctx, "node-pd-b", true); err != nil {
		t.Fatalf("fence a node with the list deleted: %v", err)
	}
	if cm, err := admin.CoreV1().ConfigMaps("ferry-system").Get(ctx, lostnode.FencedNodes, metav1.GetOptions{}); err != nil || cm.Data["node-pd-b"] == "" {
		t.Fatalf("the list of fenced nodes made again: %v %v", cm, err)
	}
	if err := effects.Taint(ctx, "node-pd-b", false); err != nil {
		t.Fatal(err)
	}
	// Others are not concerned.
	if err := admin.CoreV1().Pods("app-pd").Delete(ctx, "elsewhere", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("an administrator's deletion was refused: %v", err)
	}
}

// waitUntil polls cond on a ticker until it holds, failing t with what
// it last said after timeout.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: not within %s (%s)", what, timeout, last)
		case <-tick.C:
		}
	}
}
