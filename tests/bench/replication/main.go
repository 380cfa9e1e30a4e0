// Command replication is `make bench-replication`: on one machine, with the
// same data in one run, it times full and incremental transfers of a ZFS
// volume through Ferry's peer transport (gRPC with mutual TLS, zfs send ->
// peer server -> peer client -> zfs recv) and through a raw
// `zfs send | zfs recv` pipe, alternating the two (A B A B ...) and
// comparing medians, because this machine's speed varies twofold from run
// to run. It prints MB/s for both and `ratio: X.XX` (Ferry / raw).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/pki"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const driver = "ferry.zfs.csi.io"

var insecureTransport bool

var ctx = context.Background()

func main() {
	sizeMiB := flag.Int("size-mib", 1024, "volume data in MiB (incompressible)")
	changedPct := flag.Float64("changed-percent", 1, "data changed for the incremental, in percent")
	rounds := flag.Int("rounds", 3, "rounds of A B (raw, ferry) per measurement")
	plaintext := flag.Bool("plaintext", false, "run Ferry's transport without TLS (to measure what TLS costs; Ferry never runs so in a cluster)")
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile here")
	flag.Parse()
	insecureTransport = *plaintext
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*sizeMiB, *changedPct, *rounds); err != nil {
		fmt.Fprintf(os.Stderr, "bench-replication: %v\n", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type bench struct {
	src, dst     *zfstest.Pool
	srcS, dstS   *zfs.Store
	client       *peer.Client
	server       *peer.Server
	size, change int64
}

func run(sizeMiB int, changedPct float64, rounds int) error {
	b := &bench{size: int64(sizeMiB) << 20}
	b.change = int64(float64(b.size) * changedPct / 100)
	poolSize := fmt.Sprintf("%dM", 3*sizeMiB+512)
	var err error
	if b.src, err = zfstest.CreatePool("ferry-bench-src", poolSize); err != nil {
		return err
	}
	defer b.src.Destroy()
	if b.dst, err = zfstest.CreatePool("ferry-bench-dst", poolSize); err != nil {
		return err
	}
	defer b.dst.Destroy()
	if b.srcS, err = openStore(b.src.Name); err != nil {
		return err
	}
	if b.dstS, err = openStore(b.dst.Name); err != nil {
		return err
	}
	if err := b.startTransport(); err != nil {
		return err
	}
	defer b.server.Stop()
	defer b.client.Close()

	fmt.Printf("writing %d MiB of random data, snapshot ferry-1, changing %d MiB, snapshot ferry-2\n", sizeMiB, b.change>>20)
	if err := b.prepare(); err != nil {
		return err
	}
	full := b.measure("full", rounds, ports.SendRequest{Volume: "bench", To: "ferry-1-1"}, "")
	incr := b.measure("incremental", rounds, ports.SendRequest{Volume: "bench", From: "ferry-1-1", To: "ferry-1-2"}, "ferry-1-1")
	if full.err != nil || incr.err != nil {
		return fmt.Errorf("full: %v, incremental: %v", full.err, incr.err)
	}
	fmt.Printf("\nfull %d MiB:        raw %7.1f MB/s   ferry %7.1f MB/s\n", sizeMiB, full.rawMBps, full.ferryMBps)
	fmt.Printf("incremental %.0f%%:    raw %7.3f s      ferry %7.3f s\n", changedPct, incr.raw.Seconds(), incr.ferry.Seconds())
	fmt.Printf("incremental cost: %.1f%% of the full transfer (ferry)\n", 100*incr.ferry.Seconds()/full.ferry.Seconds())
	fmt.Printf("ratio incremental: %.2f\n", incr.raw.Seconds()/incr.ferry.Seconds())
	fmt.Printf("ratio: %.2f\n", full.ferryMBps/full.rawMBps)
	return nil
}

func openStore(pool string) (*zfs.Store, error) {
	if out, err := exec.Command("zfs", "create", "-o", "atime=off", pool+"/ferry").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	s, err := zfs.New(zfs.Config{Pool: pool, Parent: "ferry", Driver: driver})
	if err != nil {
		return nil, err
	}
	return s, s.Open(ctx)
}

// startTransport serves the source store with mutual TLS on 127.0.0.1, as
// the volume managers do.
func (b *bench) startTransport() error {
	dir, err := os.MkdirTemp("", "ferry-bench-pki")
	if err != nil {
		return err
	}
	ca, err := pki.NewCA(dir, "bench")
	if err != nil {
		return err
	}
	sf, _ := ca.Issue("src")
	cf, _ := ca.Issue("dst")
	screds, err := peer.ServerTLS(peer.TLSFiles{Cert: sf.Cert, Key: sf.Key, CA: sf.CA})
	if err != nil {
		return err
	}
	ccreds, err := peer.ClientTLS(peer.TLSFiles{Cert: cf.Cert, Key: cf.Key, CA: cf.CA})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	if insecureTransport {
		screds, ccreds = nil, nil
	}
	b.server = peer.NewServer(b.srcS, screds, zap.NewNop())
	go func() { _ = b.server.Serve(l) }()
	addr := l.Addr().String()
	b.client = peer.NewClient(func(replica.Node) (string, error) { return addr, nil }, ccreds)
	return nil
}

func (b *bench) prepare() error {
	info, err := b.srcS.CreateVolume(ctx, "bench", ports.CreateOptions{CapacityBytes: b.size + 512*volume.MiB})
	if err != nil {
		return err
	}
	file := filepath.Join(info.MountPath, "data.bin")
	if err := dd("/dev/urandom", file, b.size>>20, 0, false); err != nil {
		return err
	}
	if _, err := b.srcS.CreateSnapshot(ctx, "bench", "ferry-1-1", nil); err != nil {
		return err
	}
	// Overwrite change bytes in place, spread as 1 MiB blocks.
	blocks := b.change >> 20
	step := max(1, (b.size>>20)/max(1, blocks))
	for i := int64(0); i < blocks; i++ {
		if err := dd("/dev/urandom", file, 1, i*step, true); err != nil {
			return err
		}
	}
	_, err = b.srcS.CreateSnapshot(ctx, "bench", "ferry-1-2", nil)
	return err
}

func dd(from, to string, countMiB, seekMiB int64, notrunc bool) error {
	args := []string{"if=" + from, "of=" + to, "bs=1M", fmt.Sprintf("count=%d", countMiB), fmt.Sprintf("seek=%d", seekMiB), "status=none"}
	if notrunc {
		args = append(args, "conv=notrunc")
	}
	if out, err := exec.Command("dd", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("dd: %v: %s", err, out)
	}
	return nil
}

type result struct {
	raw, ferry         time.Duration
	rawMBps, ferryMBps float64
	err                error
}

// measure alternates raw and ferry transfers of req and returns medians.
// For an incremental, each round first gives the target the base (full).
func (b *bench) measure(what string, rounds int, req ports.SendRequest, base string) result {
	var raws, ferries []time.Duration
	bytes := b.size
	if base != "" {
		bytes = b.change
	}
	for i := 0; i < rounds; i++ {
		for _, way := range []string{"raw", "ferry"} {
			target := volume.ID(fmt.Sprintf("%s-%s-%d", way, what, i))
			if base != "" {
				if err := b.raw(ports.SendRequest{Volume: req.Volume, To: base}, target); err != nil {
					return result{err: err}
				}
			}
			var d time.Duration
			var err error
			if way == "raw" {
				d, err = timed(func() error { return b.raw(req, target) })
				raws = append(raws, d)
			} else {
				d, err = timed(func() error { return b.ferry(req, target) })
				ferries = append(ferries, d)
			}
			if err != nil {
				return result{err: fmt.Errorf("%s %s: %w", way, what, err)}
			}
			fmt.Printf("  %-11s %-5s round %d: %6.2f s  %7.1f MB/s\n", what, way, i+1, d.Seconds(), float64(bytes)/1e6/d.Seconds())
			if err := b.drop(target); err != nil {
				return result{err: err}
			}
		}
	}
	r := result{raw: median(raws), ferry: median(ferries)}
	r.rawMBps = float64(bytes) / 1e6 / r.raw.Seconds()
	r.ferryMBps = float64(bytes) / 1e6 / r.ferry.Seconds()
	return r
}

func timed(fn func() error) (time.Duration, error) {
	start := time.Now()
	err := fn()
	return time.Since(start), err
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

// raw pipes zfs send into zfs recv through an OS pipe: no shell, no copy
// in between.
func (b *bench) raw(req ports.SendRequest, target volume.ID) error {
	sendArgs := []string{"send"}
	if req.From != "" {
		sendArgs = append(sendArgs, "-i", b.src.Name+"/ferry/"+string(req.Volume)+"@"+req.From)
	}
	sendArgs = append(sendArgs, b.src.Name+"/ferry/"+string(req.Volume)+"@"+req.To)
	send := exec.Command("zfs", sendArgs...)
	recv := exec.Command("zfs", "recv", b.dst.Name+"/ferry/"+string(target))
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	send.Stdout, recv.Stdin = w, r
	if err := recv.Start(); err != nil {
		return err
	}
	if err := send.Start(); err != nil {
		return err
	}
	w.Close()
	r.Close()
	if err := send.Wait(); err != nil {
		return fmt.Errorf("zfs send: %w", err)
	}
	return recv.Wait()
}

// ferry fetches req through the peer transport into target.
func (b *bench) ferry(req ports.SendRequest, target volume.ID) error {
	stream, err := b.client.Fetch(ctx, "src", req)
	if err != nil {
		return err
	}
	defer stream.Close()
	if req.From != "" {
		// The base arrived by the raw path: give it Ferry's mark first.
		if out, err := exec.Command("zfs", "set", "ferry.zfs.csi.io:driver="+driver, b.dst.Name+"/ferry/"+string(target)).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
	}
	return b.dstS.Receive(ctx, target, stream)
}

// drop destroys a received copy (Ferry's or the raw pipe's) so the next
// round starts with the same free space.
func (b *bench) drop(target volume.ID) error {
	ds := b.dst.Name + "/ferry/" + string(target)
	var out []byte
	var err error
	for i := 0; i < 50; i++ {
		_ = exec.Command("zfs", "unmount", ds).Run()
		if out, err = exec.Command("zfs", "destroy", "-r", ds).CombinedOutput(); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("destroy %s: %v: %s", ds, err, out)
}
