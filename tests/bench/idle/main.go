// Command idle measures what idle replicas cost a node: N `ferry
// volume-manager` processes on one zfs-fuse pool against a real etcd and
// kube-apiserver (tests/kubeapi), each keeping a copy of its own volume:
// secondaries of volumes whose primary is on another node (up to date,
// nothing to fetch) and primaries with no writes. It prints the CPU of
// everything Ferry runs for them on the node (the volume managers, the zfs
// commands they run, and the zfs-fuse daemon) as a percentage of one core,
// and the resident memory of each volume manager, twice in one run: with
// the volume managers waiting for changes of their ReplicatedVolume
// (--watch, the default) and re-reading it every tick (--watch=false, the
// behaviour before watches). Not a pass/fail test: `make bench-idle`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/bench/procstat"
	"github.com/ferry-csi/ferry/tests/kubeapi"
	"github.com/ferry-csi/ferry/tests/pki"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const node = "bench-node"

func main() {
	ferry := flag.String("ferry", "bin/ferry", "the ferry binary")
	secondaries := flag.Int("secondaries", 150, "idle secondaries (their primary is on another node)")
	primaries := flag.Int("primaries", 50, "idle primaries (no writes)")
	settle := flag.Duration("settle", 20*time.Second, "time for the volume managers to start and settle before measuring")
	window := flag.Duration("window", 60*time.Second, "measuring window (two snapshot intervals by default)")
	interval := flag.Duration("snapshot-interval", 30*time.Second, "the volumes' snapshot interval")
	modes := flag.String("modes", "watch,poll", "the modes to measure, in order")
	flag.Parse()
	if err := run(*ferry, *secondaries, *primaries, *settle, *window, *interval, strings.Split(*modes, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "bench-idle:", err)
		os.Exit(1)
	}
}

func run(ferry string, secondaries, primaries int, settle, window, interval time.Duration, modes []string) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-idle-")
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
	certs, err := ca.Issue(node)
	if err != nil {
		return err
	}
	pool, err := zfstest.CreatePool("ferry-idle", "8G")
	if err != nil {
		return err
	}
	defer func() {
		if err := pool.Destroy(); err != nil {
			fmt.Fprintln(os.Stderr, "bench-idle:", err)
		}
	}()
	if out, err := exec.Command("zfs", "create", pool.Name+"/ferry").CombinedOutput(); err != nil {
		return fmt.Errorf("zfs create: %v: %s", err, out)
	}
	store, err := zfs.New(zfs.Config{Pool: pool.Name, Parent: "ferry", Driver: "ferry.zfs.csi.io"})
	if err != nil {
		return err
	}
	states := rvstate.New(dynamic.NewForConfigOrDie(api.Config), nil)
	n := secondaries + primaries
	fmt.Printf("bench-idle: %d volumes on one node (%d secondaries of volumes whose primary is elsewhere, %d primaries with no writes), snapshot interval %s\n",
		n, secondaries, primaries, interval)
	var ids []volume.ID
	for i := range n {
		id := volume.ID(fmt.Sprintf("pvc-idle-%04d", i))
		if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: 16 << 20}); err != nil {
			return err
		}
		snap, err := store.CreateSnapshot(ctx, id, replica.SnapshotName(replica.Snap{Number: 1, Epoch: 1}), nil)
		if err != nil {
			return err
		}
		held := replica.Replica{Snapshot: 1, SnapshotEpoch: 1, SnapshotGUID: snap.GUID, Ready: true}
		st := replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1}
		self, other := held, held
		self.Node, other.Node = node, "elsewhere"
		if i < secondaries {
			other.Active, st.Primary = true, "elsewhere"
		} else {
			self.Active, st.Primary = true, node
		}
		st.Replicas = []replica.Replica{self, other}
		slices.SortFunc(st.Replicas, func(a, b replica.Replica) int { return strings.Compare(string(a.Node), string(b.Node)) })
		if _, err := states.Create(ctx, st); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	zfsFuse, err := procstat.PidOf("zfs-fuse")
	if err != nil {
		return err
	}
	results := map[string]result{}
	for _, mode := range modes {
		r, err := measure(ferry, mode, ids, kubeconfig, pool.Name, certs, interval, settle, window, zfsFuse)
		if err != nil {
			return err
		}
		results[mode] = r
		fmt.Printf("%-5s CPU %.1f%% of one core for %d volumes (volume managers and their zfs commands %.1f%%, zfs-fuse %.1f%%); %.2f%% per volume; memory per volume manager: median %.1f MiB, max %.1f MiB (resident with the shared binary: %.1f MiB)\n",
			mode+":", r.total(), n, r.ferry, r.zfsFuse, r.total()/float64(n), r.rssMedian, r.rssMax, r.totalMedian)
	}
	if w, p := results["watch"], results["poll"]; w.total() > 0 && p.total() > 0 {
		fmt.Printf("idle: %.1f%% of one core for %d volumes (goal <= 20%%), %.1f MiB per replica (goal <= 20); polling every tick costs %.1fx as much\n",
			w.total(), n, w.rssMedian, p.total()/w.total())
	}
	return nil
}

type result struct{ ferry, zfsFuse, rssMedian, rssMax, totalMedian float64 }

func (r result) total() float64 { return r.ferry + r.zfsFuse }

// measure starts one volume manager per volume, lets them settle, and
// measures their CPU (their children's included, reaped or not yet) and
// zfs-fuse's over window; then kills them.
func measure(ferry, mode string, ids []volume.ID, kubeconfig, pool string, certs pki.Files, interval, settle, window time.Duration, zfsFuse int) (result, error) {
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for _, id := range ids {
		cmd := exec.Command(ferry, "volume-manager", "--volume", string(id), "--node-id", node,
			"--pool", pool, "--parent-dataset", "ferry", "--cluster-state", "kubernetes", "--kubeconfig", kubeconfig,
			"--peer-cert", certs.Cert, "--peer-key", certs.Key, "--peer-ca", certs.CA,
			"--tick", "1s", "--snapshot-interval", interval.String(), "--watch="+strconv.FormatBool(mode == "watch"))
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			return result{}, err
		}
		procs = append(procs, cmd)
	}
	time.Sleep(settle)
	for _, p := range procs {
		if p.ProcessState != nil || syscall.Kill(p.Process.Pid, 0) != nil {
			return result{}, fmt.Errorf("%s: a volume manager exited during the settle", mode)
		}
	}
	before, err := cpuOf(procs, zfsFuse)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	time.Sleep(window)
	after, err := cpuOf(procs, zfsFuse)
	if err != nil {
		return result{}, err
	}
	elapsed := time.Since(start).Seconds()
	var rss, total []float64
	for _, p := range procs {
		kib, err := procstat.KiB(p.Process.Pid, "RssAnon")
		if err != nil {
			return result{}, err
		}
		rss = append(rss, float64(kib)/1024)
		if kib, err = procstat.KiB(p.Process.Pid, "VmRSS"); err != nil {
			return result{}, err
		}
		total = append(total, float64(kib)/1024)
	}
	slices.Sort(rss)
	slices.Sort(total)
	return result{
		ferry:       100 * (after[0] - before[0]) / elapsed,
		zfsFuse:     100 * (after[1] - before[1]) / elapsed,
		rssMedian:   rss[len(rss)/2],
		rssMax:      rss[len(rss)-1],
		totalMedian: total[len(total)/2],
	}, nil
}

// cpuOf returns the CPU seconds used so far by procs (their reaped
// children included, and their live children's) and by zfs-fuse.
func cpuOf(procs []*exec.Cmd, zfsFuse int) ([2]float64, error) {
	var out [2]float64
	for _, p := range procs {
		s, err := procstat.CPUSeconds(p.Process.Pid, true)
		if err != nil {
			return out, err
		}
		out[0] += s
	}
	s, err := procstat.CPUSeconds(zfsFuse, false)
	out[1] = s
	return out, err
}
