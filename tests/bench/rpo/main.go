// Command rpo measures the loss bound a short snapshot interval holds when
// many volumes are written continuously: for each count of volumes (10, 50
// and 100 by default) it runs two "nodes" on one machine (two zfs-fuse
// pools, a and b), each volume's primary volume manager on a and its
// secondary on b, against a real etcd and kube-apiserver (tests/kubeapi),
// with a writer appending to every primary's filesystem. It samples the
// RPO reached, the age of the newest snapshot each secondary reported
// holding (what a takeover would start from), and prints its median, 99th
// percentile and maximum, with what Ferry costs per snapshot: the volume
// managers' CPU (their zfs commands included), zfs-fuse's, the API
// server's and etcd's, and the ReplicatedVolume writes per volume per
// interval. Not a pass/fail test: `make bench-rpo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/bench/apimetrics"
	"github.com/ferry-csi/ferry/tests/bench/procstat"
	"github.com/ferry-csi/ferry/tests/kubeapi"
	"github.com/ferry-csi/ferry/tests/pki"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

type options struct {
	ferry    string
	counts   []int
	interval time.Duration
	settle   time.Duration
	window   time.Duration
	write    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.ferry, "ferry", "bin/ferry", "the ferry binary")
	counts := flag.String("volumes", "10,50,100", "volume counts, one run each, in order (a run that cannot keep up stops the larger ones)")
	flag.DurationVar(&o.interval, "snapshot-interval", time.Second, "the volumes' snapshot interval")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "time for the volume managers to start and the secondaries' first full receive, before measuring (longer with more volumes: 0.3 s more per volume)")
	flag.DurationVar(&o.window, "window", 60*time.Second, "measuring window")
	flag.DurationVar(&o.write, "write-every", 100*time.Millisecond, "each writer appends 4 KiB to its volume this often")
	flag.Parse()
	for _, c := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			fail(fmt.Errorf("-volumes: %q is no count", c))
		}
		o.counts = append(o.counts, n)
	}
	if err := run(o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench-rpo:", err)
	os.Exit(1)
}

// node is one of the two "nodes": a pool, its store and its certificate.
type node struct {
	name  replica.Node
	pool  *zfstest.Pool
	store *zfs.Store
	certs pki.Files
	port  int // the peer service, served by its first volume manager
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "bench-rpo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	api, kubeconfig, err := kubeapi.NewWithReplicatedVolumes(dir, "deploy/crds/crd-replicatedvolume.yaml", rvapi.GVR)
	if err != nil {
		return err
	}
	defer api.Stop()
	ca, err := pki.NewCA(dir, "bench")
	if err != nil {
		return err
	}
	var nodes [2]*node
	for i, name := range []replica.Node{"a", "b"} {
		certs, err := ca.Issue(string(name))
		if err != nil {
			return err
		}
		pool, err := zfstest.CreatePool("ferry-rpo-"+string(name), "8G")
		if err != nil {
			return err
		}
		defer func() {
			if err := pool.Destroy(); err != nil {
				fmt.Fprintln(os.Stderr, "bench-rpo:", err)
			}
		}()
		if out, err := exec.Command("zfs", "create", "-o", "atime=off", pool.Name+"/ferry").CombinedOutput(); err != nil {
			return fmt.Errorf("zfs create: %v: %s", err, out)
		}
		store, err := zfs.New(zfs.Config{Pool: pool.Name, Parent: "ferry", Driver: "ferry.zfs.csi.io"})
		if err != nil {
			return err
		}
		nodes[i] = &node{name: name, pool: pool, store: store, certs: certs, port: 17400 + i}
	}
	zfsFuse, err := procstat.PidOf("zfs-fuse")
	if err != nil {
		return err
	}
	fmt.Printf("bench-rpo: each volume written continuously (4 KiB every %s), its primary on node a and its secondary on node b (two zfs-fuse pools on this machine), snapshot interval %s, a real API server; RPO = age of the newest snapshot the secondary reported (whole seconds: ZFS's creation time)\n",
		o.write, o.interval)
	for _, n := range o.counts {
		r, err := measure(o, api, kubeconfig, nodes, zfsFuse, n)
		if err != nil {
			return err
		}
		fmt.Printf("rpo: %3d volumes: p50 %.1f s, p99 %.1f s, max %.1f s (goal: p99 <= %s + the transfer); snapshots %.2f per volume per interval; ReplicatedVolume writes %.2f per volume per interval; CPU, %% of one core: volume managers %.0f (their own processes %.0f, their zfs commands %.0f), zfs-fuse %.0f, API server and etcd %.0f\n",
			n, r.p50, r.p99, r.max, 2*o.interval, r.snapshots, r.writes, r.ferry, r.own, r.ferry-r.own, r.zfsFuse, r.api)
		if r.p99 > 10*o.interval.Seconds() {
			fmt.Printf("rpo: %d volumes did not keep up (p99 above ten intervals): larger counts not run\n", n)
			break
		}
	}
	return nil
}

type result struct {
	p50, p99, max       float64
	snapshots, writes   float64
	ferry, zfsFuse, api float64
	own                 float64 // the volume managers without their zfs commands
}

func measure(o options, api *kubeapi.Server, kubeconfig string, nodes [2]*node, zfsFuse, n int) (result, error) {
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(api.Config)
	states := rvstate.New(dyn, nil)
	a, b := nodes[0], nodes[1]
	var ids []volume.ID
	defer func() {
		for _, id := range ids {
			for _, nd := range nodes {
				if _, err := nd.store.GetVolume(ctx, id); err == nil {
					if err := nd.store.DestroyVolume(ctx, id); err != nil {
						fmt.Fprintf(os.Stderr, "bench-rpo: destroy %s on %s: %v\n", id, nd.name, err)
					}
				}
			}
			_ = dyn.Resource(rvapi.GVR).Delete(ctx, string(id), metav1.DeleteOptions{})
		}
	}()
	mounts := map[volume.ID]string{}
	for i := range n {
		id := volume.ID(fmt.Sprintf("pvc-rpo-%d-%04d", n, i))
		info, err := a.store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: 64 << 20,
			Metadata: map[string]string{ports.MetaName: string(id), ports.MetaReplicationFactor: "2"}})
		if err != nil {
			return result{}, err
		}
		ids = append(ids, id)
		mounts[id] = info.MountPath
		if _, err := states.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: a.name,
			SnapshotInterval: o.interval, Replicas: []replica.Replica{{Node: a.name, Active: true}}}); err != nil {
			return result{}, err
		}
	}
	peers := fmt.Sprintf("a=127.0.0.1:%d,b=127.0.0.1:%d", a.port, b.port)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i, id := range ids {
		for _, nd := range nodes {
			args := []string{"volume-manager", "--volume", string(id), "--node-id", string(nd.name),
				"--pool", nd.pool.Name, "--parent-dataset", "ferry", "--cluster-state", "kubernetes", "--kubeconfig", kubeconfig,
				"--peers", peers, "--peer-cert", nd.certs.Cert, "--peer-key", nd.certs.Key, "--peer-ca", nd.certs.CA,
				"--snapshot-interval", o.interval.String()}
			if i == 0 {
				// The first volume's managers serve their node's pool
				// to the other node, as a node's daemon does.
				args = append(args, "--peer-listen", fmt.Sprintf("127.0.0.1:%d", nd.port))
			}
			cmd := exec.Command(o.ferry, args...)
			if i == 0 {
				logf, err := os.Create(filepath.Join(os.TempDir(), fmt.Sprintf("bench-rpo-%d-%s.log", n, nd.name)))
				if err != nil {
					return result{}, err
				}
				defer logf.Close()
				cmd.Stdout, cmd.Stderr = logf, logf
			}
			if err := cmd.Start(); err != nil {
				return result{}, err
			}
			procs = append(procs, cmd)
		}
	}
	stop := make(chan struct{})
	var writers sync.WaitGroup
	defer func() { close(stop); writers.Wait() }()
	chunk := make([]byte, 4096)
	for _, id := range ids {
		writers.Add(1)
		go func() {
			defer writers.Done()
			f, err := os.OpenFile(filepath.Join(mounts[id], "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench-rpo: writer:", err)
				return
			}
			defer f.Close()
			t := time.NewTicker(o.write)
			defer t.Stop()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				copy(chunk, strconv.Itoa(k))
				if _, err := f.Write(chunk); err != nil {
					fmt.Fprintln(os.Stderr, "bench-rpo: writer:", err)
					return
				}
			}
		}()
	}
	time.Sleep(o.settle)
	for _, p := range procs {
		if syscall.Kill(p.Process.Pid, 0) != nil {
			return result{}, fmt.Errorf("%d volumes: a volume manager exited during the settle", n)
		}
	}
	kube := kubernetes.NewForConfigOrDie(api.Config)
	// counters are the CPU seconds (cpuOf) and ReplicatedVolume writes so far.
	counters := func() ([4]float64, float64, error) {
		cpu, err := cpuOf(procs, zfsFuse, api)
		if err != nil {
			return cpu, 0, err
		}
		w, err := apimetrics.Writes(ctx, kube, "replicatedvolumes")
		return cpu, w, err
	}
	cpu0, w0, err := counters()
	if err != nil {
		return result{}, err
	}
	first, err := reported(ctx, dyn, b.name)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var ages []float64
	last := map[string]int64{}
	for time.Since(start) < o.window {
		time.Sleep(500 * time.Millisecond)
		now := time.Now()
		held, err := reported(ctx, dyn, b.name)
		if err != nil {
			return result{}, err
		}
		for name, h := range held {
			// Nothing received yet (no time): counted as very old.
			ages = append(ages, now.Sub(h.taken).Seconds())
			last[name] = h.snapshot
		}
	}
	elapsed := time.Since(start).Seconds()
	cpu1, w1, err := counters()
	if err != nil {
		return result{}, err
	}
	intervals := elapsed / o.interval.Seconds()
	var received float64
	for name, num := range last {
		received += float64(num - first[name].snapshot)
	}
	slices.Sort(ages)
	pct := func(p float64) float64 {
		if len(ages) == 0 {
			return 0
		}
		return ages[min(len(ages)-1, int(p*float64(len(ages))))]
	}
	return result{
		p50: pct(0.5), p99: pct(0.99), max: pct(1),
		snapshots: received / float64(n) / intervals,
		writes:    (w1 - w0) / float64(n) / intervals,
		ferry:     100 * (cpu1[0] - cpu0[0]) / elapsed,
		zfsFuse:   100 * (cpu1[1] - cpu0[1]) / elapsed,
		api:       100 * (cpu1[2] - cpu0[2]) / elapsed,
		own:       100 * (cpu1[3] - cpu0[3]) / elapsed,
	}, nil
}

// held is what a replica reported holding: its snapshot's number and when
// it was taken (the Unix epoch when it reported none).
type held struct {
	snapshot int64
	taken    time.Time
}

// reported is what each volume's replica on nd reported, by volume.
func reported(ctx context.Context, dyn dynamic.Interface, nd replica.Node) (map[string]held, error) {
	l, err := dyn.Resource(rvapi.GVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]held{}
	for _, it := range l.Items {
		reps, _, _ := unstructuredSlice(it.Object, "status", "replicas")
		for _, r := range reps {
			m, _ := r.(map[string]any)
			if m["node"] != string(nd) {
				continue
			}
			h := held{taken: time.Unix(0, 0)}
			h.snapshot, _ = m["snapshot"].(int64)
			if s, _ := m["snapshotTime"].(string); s != "" {
				if t, err := time.Parse(time.RFC3339, s); err == nil {
					h.taken = t
				}
			}
			out[it.GetName()] = h
		}
	}
	return out, nil
}

func unstructuredSlice(obj map[string]any, path ...string) ([]any, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// cpuOf returns the CPU seconds used so far by the volume managers (their
// zfs commands included), by zfs-fuse, by the API server and etcd, and by
// the volume managers' own processes (without their zfs commands).
func cpuOf(procs []*exec.Cmd, zfsFuse int, api *kubeapi.Server) ([4]float64, error) {
	var out [4]float64
	for _, p := range procs {
		s, err := procstat.CPUSeconds(p.Process.Pid, true)
		if err != nil {
			return out, err
		}
		out[0] += s
		if s, err = procstat.CPUSeconds(p.Process.Pid, false); err != nil {
			return out, err
		}
		out[3] += s
	}
	s, err := procstat.CPUSeconds(zfsFuse, false)
	if err != nil {
		return out, err
	}
	out[1] = s
	for _, pid := range api.Pids() {
		s, err := procstat.CPUSeconds(pid, false)
		if err != nil {
			return out, err
		}
		out[2] += s
	}
	return out, nil
}
