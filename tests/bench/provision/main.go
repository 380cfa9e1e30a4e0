// Command provision measures provisioning on the running local cluster
// (make cluster-up cluster-deploy): N claims of an Immediate StorageClass
// created at once, no pods, timed until every one is Bound; then, for the
// replicated class, the API server writes Ferry's volumes make in steady
// state (ReplicatedVolume writes per volume per snapshot interval, from
// the API server's own request counters); then everything is deleted and
// timed until no ReplicatedVolume is left. Not a pass/fail test: `make
// bench-provision`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ferry-csi/ferry/tests/bench/apimetrics"
	"github.com/ferry-csi/ferry/tests/bench/procstat"
)

var rvGVR = schema.GroupVersionResource{Group: "ferry.zfs.csi.io", Version: "v1alpha1", Resource: "replicatedvolumes"}

func main() {
	kubeconfig := flag.String("kubeconfig", envOr("KUBECONFIG", "/var/lib/ferry-e2e/kubeconfig"), "the cluster's kubeconfig")
	n := flag.Int("claims", 100, "claims created at once with one copy")
	nr := flag.Int("replicated-claims", 50, "claims created at once with two copies or more (100 at two copies, 200 replica pods starting on this 2-core machine, wedged zfs-fuse here)")
	rfs := flag.String("replication-factors", "1,2", "the classes' defaultReplicationFactor, one run each")
	interval := flag.Duration("snapshot-interval", time.Minute, "the classes' snapshotInterval (zfs-fuse on two cores cannot snapshot 100 volumes every 10 s)")
	intervals := flag.Int("steady-intervals", 2, "snapshot intervals over which writes are counted")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	cfg.QPS, cfg.Burst = -1, 0 // the bench measures Ferry, not its own client
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, f := range strings.Split(*rfs, ",") {
		rf, err := strconv.Atoi(f)
		if err != nil {
			fail(err)
		}
		count := *n
		if rf > 1 {
			count = *nr
		}
		if err := run(kube, dyn, count, rf, *interval, *intervals); err != nil {
			fail(err)
		}
	}
}

func run(kube kubernetes.Interface, dyn dynamic.Interface, n, rf int, interval time.Duration, intervals int) error {
	ctx := context.Background()
	class := fmt.Sprintf("ferry-bench-rf%d", rf)
	immediate := storagev1.VolumeBindingImmediate
	del := corev1.PersistentVolumeReclaimDelete
	_ = kube.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{})
	if _, err := kube.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "ferry.zfs.csi.io", VolumeBindingMode: &immediate, ReclaimPolicy: &del,
		Parameters: map[string]string{"defaultReplicationFactor": strconv.Itoa(rf), "snapshotInterval": interval.String()},
	}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = kube.StorageV1().StorageClasses().Delete(ctx, class, metav1.DeleteOptions{}) }()
	ns := fmt.Sprintf("ferry-bench-%d", time.Now().UnixNano()%1e6)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer func() { _ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) }()

	var base load
	if rf > 1 {
		// What the cluster costs with Ferry and no volume, to tell the
		// replica pods' idle cost from everything else on the machine.
		var err error
		if base, err = measureLoad(baseline); err != nil {
			return err
		}
	}
	before := nodeBytes(ctx, kube)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%03d", i)},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &class,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}},
				},
			}, metav1.CreateOptions{})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	bound := 0
	deadline := time.Now().Add(10 * time.Minute)
	for bound < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("rf %d: only %d of %d claims Bound after 10 minutes", rf, bound, n)
		}
		l, err := kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		bound = 0
		for _, c := range l.Items {
			if c.Status.Phase == corev1.ClaimBound {
				bound++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	fmt.Printf("provisioned: %.1f PVCs/s (defaultReplicationFactor %d: %d claims Bound in %.1f s, no pods)\n", float64(n)/took.Seconds(), rf, n, took.Seconds())

	if rf > 1 {
		idle, err := steadyWrites(ctx, kube, dyn, n, rf, interval, intervals)
		if err != nil {
			return err
		}
		pods := float64(n * rf)
		cpu, mem := idle.cpu-base.cpu, idle.anonMiB-base.anonMiB
		fmt.Printf("idle replica pods: %d (one per copy) cost the machine %.1f%% of one core and %.0f MiB more than none (kubelets, containerd and shims, volume managers, API server: busy CPU of the whole machine, every process's own memory); per pod %.2f%% and %.1f MiB; 200 on a node: %.0f%% of one core (goal <= 20%%), %.1f MiB each (goal <= 20)\n",
			n*rf, cpu, mem, cpu/pods, mem/pods, 200*cpu/pods, mem/pods)
		after, labels := nodeBytes(ctx, kube), placementLabels(ctx, kube)
		if labels > 0 {
			fmt.Printf("node objects: %d placement labels on the nodes, %d bytes more in all (%.0f bytes per label; 200 volumes per node: about %.0f KB more per Node object)\n",
				labels, after-before, float64(after-before)/float64(labels), float64(after-before)/float64(labels)*200/1000)
		}
	}

	start = time.Now()
	if err := kube.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	deadline = time.Now().Add(10 * time.Minute)
	for {
		pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		left := 0
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				left++
			}
		}
		rvs, err := dyn.Resource(rvGVR).List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if rvs != nil {
			left += len(rvs.Items)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rf %d: %d volumes or ReplicatedVolumes left 10 minutes after the claims' deletion", rf, left)
		}
		time.Sleep(time.Second)
	}
	fmt.Printf("deleted: %d volumes (and every copy) in %.1f s\n", n, time.Since(start).Seconds())
	return nil
}

// baseline is how long the machine's idle load is measured without
// volumes.
const baseline = 30 * time.Second

// load is the machine's busy CPU (percent of one core) and the memory its
// processes hold of their own (MiB) over a window.
type load struct{ cpu, anonMiB float64 }

// measureLoad measures the machine's load over window.
func measureLoad(window time.Duration) (load, error) {
	b0, err := procstat.MachineBusy()
	if err != nil {
		return load{}, err
	}
	start := time.Now()
	time.Sleep(window)
	b1, err := procstat.MachineBusy()
	if err != nil {
		return load{}, err
	}
	kib, err := procstat.TotalAnonKiB()
	if err != nil {
		return load{}, err
	}
	return load{cpu: 100 * (b1 - b0) / time.Since(start).Seconds(), anonMiB: float64(kib) / 1024}, nil
}

// steadyWrites waits until every volume has rf ready copies, then counts
// the API server's writes to ReplicatedVolumes over the given intervals,
// and measures the machine's load meanwhile.
func steadyWrites(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, n, rf int, interval time.Duration, intervals int) (load, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		l, err := dyn.Resource(rvGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return load{}, err
		}
		ready := 0
		for _, u := range l.Items {
			if r, _, _ := unstructuredInt(u.Object, "status", "readyReplicas"); r >= int64(rf) {
				ready++
			}
		}
		if ready >= n {
			break
		}
		if time.Now().After(deadline) {
			return load{}, fmt.Errorf("only %d of %d replicated volumes have %d ready copies after 10 minutes", ready, n, rf)
		}
		time.Sleep(time.Second)
	}
	before, err := apimetrics.Writes(ctx, kube, "replicatedvolumes")
	if err != nil {
		return load{}, err
	}
	window := time.Duration(intervals) * interval
	idle, err := measureLoad(window)
	if err != nil {
		return load{}, err
	}
	after, err := apimetrics.Writes(ctx, kube, "replicatedvolumes")
	if err != nil {
		return load{}, err
	}
	perVolume := (after - before) / float64(n) / float64(intervals)
	fmt.Printf("apiserver writes: %.2f per volume per snapshot interval (ReplicatedVolume writes, %d volumes of %d copies, no pods writing, over %s; goal <= 1)\n",
		perVolume, n, rf, window)
	return idle, nil
}

func unstructuredInt(obj map[string]any, path ...string) (int64, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, false, nil
		}
		cur = m[p]
	}
	switch v := cur.(type) {
	case int64:
		return v, true, nil
	case float64:
		return int64(v), true, nil
	}
	return 0, false, nil
}

// nodeBytes is the size of every Node object as JSON, summed.
func nodeBytes(ctx context.Context, kube kubernetes.Interface) int {
	l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, node := range l.Items {
		node.ManagedFields = nil // not stored per label; kubectl hides them too
		b, _ := json.Marshal(node)
		n += len(b)
	}
	return n
}

// placementLabels counts Ferry's placement labels on all nodes.
func placementLabels(ctx context.Context, kube kubernetes.Interface) int {
	l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, node := range l.Items {
		for k := range node.Labels {
			if strings.HasPrefix(k, "replica.ferry.zfs.csi.io/") {
				n++
			}
		}
	}
	return n
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-provision:", err)
	os.Exit(1)
}
