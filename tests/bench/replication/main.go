// Command replication is `make bench-replication`: it measures Ferry's
// replication transfer against the limit a pair of nodes has.
//
// Two network namespaces (ferry-bench-a, ferry-bench-b) joined by a veth
// pair stand for two nodes; each runs this program again as its node
// process (node.go). The same snapshot goes from pool ferrybench-src to
// pool ferrybench-dst:
//
//   - reference: `zfs send` -> a plain TCP connection from a to b, written
//     and read in 1 MiB pieces -> `zfs recv` (what `zfs send | nc` gives,
//     without encryption: the fastest a pair of nodes can do);
//   - ferry: Ferry's peer transport between the same namespaces: the
//     receiver's peer client fetches from the sender's peer server (gRPC
//     with mutual TLS 1.3), zfs.Store.Receive receives (ownership checks,
//     a staging dataset renamed into place for a full stream);
//   - pipe: `zfs send | zfs recv` through one OS pipe on one machine,
//     printed for information only (no pair of nodes can do that);
//   - ssh (-ssh): `zfs send | mbuffer | ssh -c aes128-gcm | mbuffer |
//     zfs recv`, the usual encrypted peer pipe, sshd in namespace a.
//
// Each round runs every way once, in alternating order (forward, then
// backward), and its ratio is reference time / ferry time (ferry MB/s /
// reference MB/s): this machine's speed varies twofold from run to run,
// so only ways measured side by side are compared. It prints each round,
// the median ratio with its min-max and a bootstrap 90 % interval (fixed
// seed), and `ratio: X.XX` (the full transfer's median). The incremental is
// measured the same way; its target is prepared (base received, marked as
// Ferry's) outside the timed region and rolled back to the base after each
// transfer, also untimed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/bench/procstat"
	"github.com/ferry-csi/ferry/tests/pki"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const (
	driver  = "ferry.zfs.csi.io"
	srcPool = "ferrybench-src"
	dstPool = "ferrybench-dst"
	vol     = "bench"
)

var ctx = context.Background()

type options struct {
	sizeMiB    int
	changedPct float64
	rounds     int
	plaintext  bool
	ssh        bool
	ab         string
	cpuprofile string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "node" {
		if err := nodeMain(os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "bench-replication node: %v\n", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.sizeMiB, "size-mib", 1024, "volume data in MiB (incompressible)")
	flag.Float64Var(&o.changedPct, "changed-percent", 1, "data changed for the incremental, in percent")
	flag.IntVar(&o.rounds, "rounds", 7, "rounds; each runs every way once, in alternating order")
	flag.BoolVar(&o.plaintext, "plaintext", false, "run Ferry's transport without TLS (to measure what TLS costs; Ferry never runs so in a cluster)")
	flag.BoolVar(&o.ssh, "ssh", false, "also measure zfs send | mbuffer | ssh | mbuffer | zfs recv (needs mbuffer, ssh, sshd)")
	flag.StringVar(&o.ab, "ab", "", "also run Ferry's transport from `BINARY`, another build of this benchmark (e.g. of the commit before a change), as the way ferry-ab: paired rounds of two versions")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write the node processes' CPU profiles to PREFIX.sender and PREFIX.receiver")
	flag.Parse()
	if o.rounds < 1 || o.sizeMiB < 1 {
		fmt.Fprintln(os.Stderr, "bench-replication: -rounds and -size-mib must be positive")
		os.Exit(2)
	}
	b := &bench{opts: o}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "bench-replication: %v: cleaning up\n", s)
		b.cleanup()
		os.Exit(1)
	}()
	err := b.run()
	b.cleanup()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-replication: %v\n", err)
		os.Exit(1)
	}
}

type bench struct {
	opts         options
	size, change int64
	tmp          string
	src, dst     *zfstest.Pool
	srcS         *zfs.Store

	mu        sync.Mutex
	procs     []*exec.Cmd // started here, stopped by cleanup (last first)
	stdins    []io.Closer
	piped     []*exec.Cmd          // the procs that end when their stdin closes
	recv      map[string]*node     // receiver node by way ("ferry-ab": the -ab build's)
	sender    map[string]int       // the sender node's pid by way
	cpu       map[string][]float64 // full transfers: the two node processes' CPU seconds by way, round by round
	sshCmd    string               // the ssh command line with its options, ssh way only
	cleaned   bool                 // no process starts once set
	cleanOnce sync.Once
	cleanups  []func()
}

func (b *bench) atCleanup(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleanups = append(b.cleanups, f)
}

// cleanup stops every process started here, destroys the pools and the
// namespaces; it runs once, at the end or on a signal, and a second caller
// waits until the first is done (main must not exit halfway through a
// cleanup the signal started).
func (b *bench) cleanup() { b.cleanOnce.Do(b.doCleanup) }

func (b *bench) doCleanup() {
	b.mu.Lock()
	b.cleaned = true
	procs, stdins, cleanups, pipedProcs := b.procs, b.stdins, b.cleanups, b.piped
	b.mu.Unlock()
	for _, c := range stdins {
		_ = c.Close() // the node processes end at EOF (and write their profiles)
	}
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !slices.Contains(pipedProcs, p) {
			_ = p.Process.Signal(syscall.SIGTERM) // sshd and ssh: no stdin to close
		}
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

func (b *bench) run() error {
	o := b.opts
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, zfs)")
	}
	b.size = int64(o.sizeMiB) << 20
	b.change = int64(float64(b.size) * o.changedPct / 100)
	var err error
	if b.tmp, err = os.MkdirTemp("", "ferry-bench-replication"); err != nil {
		return err
	}
	b.atCleanup(func() { _ = os.RemoveAll(b.tmp) })
	poolSize := fmt.Sprintf("%dM", 3*o.sizeMiB+512)
	for _, name := range []string{srcPool, dstPool} {
		if exec.Command("zpool", "list", name).Run() == nil { // left by a killed run: ours by name
			_ = (&zfstest.Pool{Name: name, File: filepath.Join(zfstest.Dir, name+".img")}).Destroy()
		}
	}
	if b.src, err = zfstest.CreatePool(srcPool, poolSize); err != nil {
		return err
	}
	b.atCleanup(func() { report("destroy pool", b.src.Destroy()) })
	if b.dst, err = zfstest.CreatePool(dstPool, poolSize); err != nil {
		return err
	}
	b.atCleanup(func() { report("destroy pool", b.dst.Destroy()) })
	if b.srcS, err = openStore(srcPool); err != nil {
		return err
	}
	if _, err := openStore(dstPool); err != nil {
		return err
	}
	fmt.Printf("writing %d MiB of random data, snapshot ferry-1-1, changing %d MiB, snapshot ferry-1-2\n", o.sizeMiB, b.change>>20)
	if err := b.prepare(); err != nil {
		return err
	}
	if err := setupNetwork(); err != nil {
		return err
	}
	b.atCleanup(teardownNetwork)
	if err := b.startNodes(); err != nil {
		return err
	}
	ways := []string{"pipe", "reference", "ferry"}
	if o.ab != "" {
		ways = append(ways, "ferry-ab")
	}
	if o.ssh {
		if err := b.startSSH(); err != nil {
			return err
		}
		ways = append(ways, "ssh")
	}
	fmt.Printf("%d rounds, each way once per round in alternating order; ratio = reference time / ferry time\n", o.rounds)

	full := ports.SendRequest{Volume: vol, To: "ferry-1-1"}
	fullT, err := b.measure("full", ways, full, func(way string, i int) (string, func() error) {
		target := fmt.Sprintf("full-%s-%d", way, i)
		return target, func() error { return b.drop(target) }
	})
	if err != nil {
		return err
	}
	// The incremental's target: the base received once by the pipe and
	// marked as Ferry's, before anything is timed.
	const incr = "incr"
	if err := b.pipe(full, incr); err != nil {
		return err
	}
	if err := zfsCmd("set", "ferry.zfs.csi.io:driver="+driver, dstPool+"/ferry/"+incr); err != nil {
		return err
	}
	incrT, err := b.measure("incremental", ways, ports.SendRequest{Volume: vol, From: "ferry-1-1", To: "ferry-1-2"}, func(string, int) (string, func() error) {
		return incr, func() error { return zfsCmd("rollback", "-r", dstPool+"/ferry/"+incr+"@ferry-1-1") }
	})
	if err != nil {
		return err
	}

	fmt.Println()
	mbps := func(bytes int64, s float64) float64 { return float64(bytes) / 1e6 / s }
	fmt.Printf("full %d MiB, medians: reference %.1f MB/s, ferry %.1f MB/s", o.sizeMiB, mbps(b.size, median(fullT["reference"])), mbps(b.size, median(fullT["ferry"])))
	if o.ssh {
		fmt.Printf(", ssh %.1f MB/s", mbps(b.size, median(fullT["ssh"])))
	}
	fmt.Printf("; pipe on one machine (information) %.1f MB/s\n", mbps(b.size, median(fullT["pipe"])))
	fmt.Printf("incremental %g%%, medians: reference %.3f s, ferry %.3f s", o.changedPct, median(incrT["reference"]), median(incrT["ferry"]))
	if o.ssh {
		fmt.Printf(", ssh %.3f s", median(incrT["ssh"]))
	}
	fmt.Printf("; pipe on one machine (information) %.3f s\n", median(incrT["pipe"]))
	fmt.Printf("incremental cost: %.1f%% of the full transfer (ferry)\n", 100*median(incrT["ferry"])/median(fullT["ferry"]))
	if ref, fy := median(b.cpu["reference"]), median(b.cpu["ferry"]); ref > 0 {
		gb := float64(b.size) / 1e9
		fmt.Printf("transport CPU per GB (both node processes, their zfs send and recv left out), medians of the full rounds: reference (plain relay) %.2f s, ferry %.2f s: %.1fx the relay (goal <= 1.5x)\n",
			ref/gb, fy/gb, fy/ref)
		if ab := b.cpu["ferry-ab"]; len(ab) > 0 {
			fmt.Printf("transport CPU per GB, ferry-ab: %.2f s\n", median(ab)/gb)
		}
	}
	fs := summarise(ratios(fullT, "ferry"))
	is := summarise(ratios(incrT, "ferry"))
	printSpread("full, ferry", fs)
	printSpread("incremental, ferry", is)
	if o.ssh {
		printSpread("full, ssh", summarise(ratios(fullT, "ssh")))
		printSpread("incremental, ssh", summarise(ratios(incrT, "ssh")))
	}
	if o.ab != "" {
		printSpread("full, ferry-ab", summarise(ratios(fullT, "ferry-ab")))
		printSpread("incremental, ferry-ab", summarise(ratios(incrT, "ferry-ab")))
		ab := func(t map[string][]float64) []float64 {
			out := make([]float64, len(t["ferry"]))
			for i := range out {
				out[i] = t["ferry-ab"][i] / t["ferry"][i]
			}
			return out
		}
		fmt.Println("ferry-ab time / ferry time (above 1: this build is faster):")
		printSpread("full", summarise(ab(fullT)))
		printSpread("incremental", summarise(ab(incrT)))
	}
	fmt.Printf("ratio incremental: %.2f\n", is.median)
	fmt.Printf("ratio: %.2f\n", fs.median)
	return nil
}

func printSpread(what string, s spread) {
	fmt.Printf("%-20s ratio median %.2f, min-max %.2f-%.2f, 90%% bootstrap interval of the median %.2f-%.2f\n", what+":", s.median, s.min, s.max, s.lo, s.hi)
}

// ratios are reference time / way's time, round by round.
func ratios(t map[string][]float64, way string) []float64 {
	out := make([]float64, len(t[way]))
	for i := range out {
		out[i] = t["reference"][i] / t[way][i]
	}
	return out
}

func report(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-replication: %s: %v\n", what, err)
	}
}

func zfsCmd(args ...string) error {
	if out, err := exec.Command("zfs", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("zfs %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func openStore(pool string) (*zfs.Store, error) {
	if err := zfsCmd("create", "-o", "atime=off", pool+"/ferry"); err != nil {
		return nil, err
	}
	s, err := zfs.New(zfs.Config{Pool: pool, Parent: "ferry", Driver: driver})
	if err != nil {
		return nil, err
	}
	return s, s.Open(ctx)
}

// startNodes starts the sender in namespace a and the receiver in b, with
// mutual TLS certificates of a throw-away CA.
func (b *bench) startNodes() error {
	ca, err := pki.NewCA(b.tmp, "bench")
	if err != nil {
		return err
	}
	sf, err := ca.Issue("sender")
	if err != nil {
		return err
	}
	rf, err := ca.Issue("receiver")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := func(ns, role, pool string, f pki.Files, bin, profile string, extra ...string) (*node, error) {
		args := append([]string{"node", "-role", role, "-pool", pool, "-cert", f.Cert, "-key", f.Key, "-ca", f.CA}, extra...)
		if b.opts.plaintext {
			args = append(args, "-plaintext")
		}
		if b.opts.cpuprofile != "" {
			args = append(args, "-cpuprofile", b.opts.cpuprofile+"."+role+profile)
		}
		cmd := inNetns(ns, bin, args...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := b.startProc(cmd, in); err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() || sc.Text() != "ready" {
			return nil, fmt.Errorf("the %s node (%s) did not start: %v", role, bin, sc.Err())
		}
		return &node{in: in, out: sc, pid: cmd.Process.Pid}, nil
	}
	snd, err := start(nsA, "sender", srcPool, sf, self, "")
	if err != nil {
		return err
	}
	b.sender = map[string]int{"ferry": snd.pid, "reference": snd.pid}
	b.recv = map[string]*node{}
	b.cpu = map[string][]float64{}
	if b.recv["ferry"], err = start(nsB, "receiver", dstPool, rf, self, ""); err != nil {
		return err
	}
	b.recv["reference"], b.recv["ssh"] = b.recv["ferry"], b.recv["ferry"]
	if b.opts.ab != "" {
		const abPort = "7444"
		snd, err := start(nsA, "sender", srcPool, sf, b.opts.ab, "-ab", "-peer-port", abPort, "-relay=false")
		if err != nil {
			return err
		}
		b.sender["ferry-ab"] = snd.pid
		if b.recv["ferry-ab"], err = start(nsB, "receiver", dstPool, rf, b.opts.ab, "-ab", "-peer-port", abPort); err != nil {
			return err
		}
	}
	return nil
}

// node is a receiver node process: one job per line in, one answer out.
type node struct {
	in  io.Writer
	out *bufio.Scanner
	pid int // nsenter execs the node process: its pid
}

func (b *bench) startProc(cmd *exec.Cmd, stdin io.Closer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cleaned {
		return errors.New("stopping")
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	b.procs = append(b.procs, cmd)
	if stdin != nil {
		b.stdins = append(b.stdins, stdin)
		b.piped = append(b.piped, cmd)
	}
	return nil
}

func (b *bench) prepare() error {
	info, err := b.srcS.CreateVolume(ctx, vol, ports.CreateOptions{CapacityBytes: b.size + 512*volume.MiB})
	if err != nil {
		return err
	}
	file := filepath.Join(info.MountPath, "data.bin")
	if err := dd("/dev/urandom", file, b.size>>20, 0, false); err != nil {
		return err
	}
	if _, err := b.srcS.CreateSnapshot(ctx, vol, "ferry-1-1", nil); err != nil {
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
	_, err = b.srcS.CreateSnapshot(ctx, vol, "ferry-1-2", nil)
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

// measure runs rounds of every way, forward in even rounds and backward in
// odd ones; target names each transfer's target and what to do after it
// (untimed). It returns the seconds of each way, round by round.
func (b *bench) measure(what string, ways []string, req ports.SendRequest, target func(way string, round int) (string, func() error)) (map[string][]float64, error) {
	times := map[string][]float64{}
	bytes := b.size
	if req.From != "" {
		bytes = b.change
	}
	for i := 0; i < b.opts.rounds; i++ {
		order := slices.Clone(ways)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, way := range order {
			t, after := target(way, i)
			cpu0, counted := b.nodesCPU(way)
			s, err := b.transfer(way, req, t)
			if err != nil {
				return nil, fmt.Errorf("%s %s round %d: %w", what, way, i+1, err)
			}
			if cpu1, _ := b.nodesCPU(way); counted && req.From == "" {
				b.cpu[way] = append(b.cpu[way], cpu1-cpu0)
			}
			times[way] = append(times[way], s)
			if err := after(); err != nil {
				return nil, err
			}
		}
		var line strings.Builder
		fmt.Fprintf(&line, "  %-11s round %d:", what, i+1)
		for _, way := range ways {
			s := times[way][i]
			fmt.Fprintf(&line, "  %s %.3f s %6.1f MB/s", way, s, float64(bytes)/1e6/s)
		}
		fmt.Fprintf(&line, "  ratio %.2f", times["reference"][i]/times["ferry"][i])
		for _, w := range []string{"ssh", "ferry-ab"} {
			if slices.Contains(ways, w) {
				fmt.Fprintf(&line, " (%s %.2f)", w, times["reference"][i]/times[w][i])
			}
		}
		fmt.Println(line.String())
	}
	return times, nil
}

// nodesCPU is the CPU seconds the way's two node processes have used so
// far, their own only: the zfs send and recv they run are the same work
// for every way and are left out, so what remains is the transport's
// (reading, encrypting, framing, writing). False for the ways that do not
// run in the node processes.
func (b *bench) nodesCPU(way string) (float64, bool) {
	snd, ok := b.sender[way]
	if !ok {
		return 0, false
	}
	s1, err1 := procstat.CPUSeconds(snd, false)
	s2, err2 := procstat.CPUSeconds(b.recv[way].pid, false)
	return s1 + s2, err1 == nil && err2 == nil
}

// transfer runs one way's transfer of req into target and returns its
// seconds: the pipe is timed here, every other way by the receiver node.
func (b *bench) transfer(way string, req ports.SendRequest, target string) (float64, error) {
	if way == "pipe" {
		start := time.Now()
		err := b.pipe(req, target)
		return time.Since(start).Seconds(), err
	}
	j := job{Way: way, Volume: string(req.Volume), From: req.From, To: req.To, Target: target}
	n := b.recv[way]
	if way == "ferry-ab" {
		j.Way = "ferry"
	}
	if way == "ssh" {
		j.Shell = b.sshPipeline(req, target)
	}
	line, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	if _, err := n.in.Write(append(line, '\n')); err != nil {
		return 0, err
	}
	if !n.out.Scan() {
		return 0, fmt.Errorf("the receiver node stopped: %v", n.out.Err())
	}
	var a answer
	if err := json.Unmarshal(n.out.Bytes(), &a); err != nil {
		return 0, err
	}
	if a.Err != "" {
		return 0, errors.New(a.Err)
	}
	return a.Seconds, nil
}

func snapArgs(req ports.SendRequest) []string {
	ds := srcPool + "/ferry/" + string(req.Volume)
	args := []string{"send"}
	if req.From != "" {
		args = append(args, "-i", ds+"@"+req.From)
	}
	return append(args, ds+"@"+req.To)
}

// pipe is `zfs send | zfs recv` through one OS pipe on this machine.
func (b *bench) pipe(req ports.SendRequest, target string) error {
	send := exec.Command("zfs", snapArgs(req)...)
	recv := exec.Command("zfs", "recv", dstPool+"/ferry/"+target)
	for _, c := range []*exec.Cmd{send, recv} {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with this process, on a signal too
	}
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

// drop destroys a received copy so the next transfer starts with the same
// free space.
func (b *bench) drop(target string) error {
	ds := dstPool + "/ferry/" + target
	var err error
	for i := 0; i < 50; i++ {
		_ = exec.Command("zfs", "unmount", ds).Run()
		if err = zfsCmd("destroy", "-r", ds); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}
