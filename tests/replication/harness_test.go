//go:build replication

package replication

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/adapters/filecluster"
	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/pki"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const driver = "ferry.zfs.csi.io"

var (
	ferryBin string
	nodes    = []replica.Node{"a", "b", "c"}
	pools    = map[replica.Node]*zfstest.Pool{}
	stores   = map[replica.Node]*zfs.Store{}
	certs    = map[replica.Node]pki.Files{}
	workDir  string
	ctx      = context.Background()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// timeScale stretches every wait (zfstest.TimeScale): the OpenZFS lane's
// guest is emulated.
var timeScale = zfstest.TimeScale()

func run(m *testing.M) int {
	if _, err := exec.LookPath("zpool"); err != nil {
		fmt.Fprintln(os.Stderr, "replication tests need ZFS: run `make test-replication` (it starts zfs-fuse)")
		return 1
	}
	var err error
	workDir, err = os.MkdirTemp("/var/tmp", "ferry-replication-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(workDir)
	ferryBin, _ = filepath.Abs(os.Getenv("FERRY_BIN"))
	if os.Getenv("FERRY_BIN") == "" {
		ferryBin = filepath.Join(workDir, "ferry")
		out, err := exec.Command("go", "build", "-o", ferryBin, "../../cmd/ferry").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build ferry: %v\n%s", err, out)
			return 1
		}
	}
	ca, err := pki.NewCA(workDir, "ferry-replication")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, n := range nodes {
		if certs[n], err = ca.Issue("node-" + string(n)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		name := "ferry-" + string(n)
		if exec.Command("zpool", "list", name).Run() == nil {
			// A pool of this name left by an interrupted run is ours only if
			// its backing file is in the test directory.
			out, _ := exec.Command("zpool", "status", name).CombinedOutput()
			if !strings.Contains(string(out), zfstest.Dir) {
				fmt.Fprintf(os.Stderr, "a pool named %s exists and is not a test pool: refusing to touch it\n", name)
				return 1
			}
			_ = (&zfstest.Pool{Name: name, File: filepath.Join(zfstest.Dir, name+".img")}).Destroy()
		}
		p, err := zfstest.CreatePool(name, "3G")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pools[n] = p
		// Secondaries are never written: atime off keeps reads (checksums)
		// from modifying them between incremental receives.
		if out, err := exec.Command("zfs", "create", "-o", "atime=off", name+"/ferry").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%v: %s\n", err, out)
			return 1
		}
		s, err := zfs.New(zfs.Config{Pool: name, Parent: "ferry", Driver: driver})
		if err == nil {
			err = s.Open(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		stores[n] = s
	}
	code := m.Run()
	for _, n := range nodes {
		if err := pools[n].Destroy(); err != nil {
			fmt.Fprintf(os.Stderr, "destroy pool: %v\n", err)
			code = 1
		}
	}
	return code
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// freePort returns a 127.0.0.1 port free now, below the kernel's
// ephemeral range (32768 and up here): a volume manager binds it later,
// maybe again after a restart, and a port the kernel may hand to any
// outgoing connection meanwhile (":0") was taken under load ("address
// already in use", seen once while a cluster ran next to the tests). No
// port is handed out twice by this process.
func freePort(t *testing.T) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for i := 0; i < 1000; i++ {
		p := 20000 + rand.IntN(12000)
		if portsUsed[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		portsUsed[p] = true
		return p
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

// volumeCluster is one volume's three volume managers and their state.
type volumeCluster struct {
	t        *testing.T
	id       volume.ID
	state    ports.ClusterState
	stateDir string
	peerPort map[replica.Node]int
	status   map[replica.Node]int
	procs    map[replica.Node]*exec.Cmd
	logs     map[replica.Node]string
	extra    []string
}

// newVolume creates the volume on node a (as provisioning does) and its
// shared state with a as the primary of epoch 1, rf replicas wanted.
func newVolume(t *testing.T, id volume.ID, rf int) *volumeCluster {
	t.Helper()
	c := &volumeCluster{t: t, id: id, stateDir: filepath.Join(workDir, "state-"+string(id)),
		peerPort: map[replica.Node]int{}, status: map[replica.Node]int{}, procs: map[replica.Node]*exec.Cmd{}, logs: map[replica.Node]string{}}
	st, err := filecluster.New(c.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	c.state = st
	if _, err := stores["a"].CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: 1 << 30,
		Metadata: map[string]string{ports.MetaName: string(id), ports.MetaReplicationFactor: fmt.Sprint(rf)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, replica.State{Volume: id, ReplicationFactor: rf, Epoch: 1, Primary: "a",
		Replicas: []replica.Replica{{Node: "a", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		c.peerPort[n], c.status[n] = freePort(t), freePort(t)
	}
	t.Cleanup(func() {
		for n := range c.procs {
			c.kill(n)
		}
		for _, n := range nodes {
			if _, err := stores[n].GetVolume(ctx, id); err == nil {
				if err := stores[n].DestroyVolume(ctx, id); err != nil {
					t.Errorf("cleanup %s on %s: %v", id, n, err)
				}
			}
		}
	})
	return c
}

func (c *volumeCluster) peers() string {
	var p []string
	for _, n := range nodes {
		p = append(p, fmt.Sprintf("%s=127.0.0.1:%d", n, c.peerPort[n]))
	}
	return strings.Join(p, ",")
}

// start runs node's volume manager for the volume.
func (c *volumeCluster) start(n replica.Node) {
	c.t.Helper()
	logPath := filepath.Join(workDir, fmt.Sprintf("%s-%s.log", c.id, n))
	c.logs[n] = logPath
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	args := []string{"volume-manager", "--volume", string(c.id), "--node-id", string(n),
		"--pool", pools[n].Name, "--parent-dataset", "ferry",
		"--peer-listen", fmt.Sprintf("127.0.0.1:%d", c.peerPort[n]), "--peers", c.peers(),
		"--peer-cert", certs[n].Cert, "--peer-key", certs[n].Key, "--peer-ca", certs[n].CA,
		"--cluster-state", "file:" + c.stateDir, "--status-listen", fmt.Sprintf("127.0.0.1:%d", c.status[n]),
		"--tick", "200ms", "--snapshot-interval", "1s", "--keep", "3", "--stop-timeout", "30s"}
	args = append(args, c.extra...)
	cmd := exec.Command(ferryBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[n] = cmd
	c.eventually(fmt.Sprintf("%s's status endpoint answers", n), 20*time.Second, func() bool {
		_, err := c.statusOf(n)
		return err == nil
	})
}

// stop sends SIGTERM and waits: the manager runs the safe-deletion rule.
func (c *volumeCluster) stop(n replica.Node) {
	c.t.Helper()
	if cmd, ok := c.procs[n]; ok {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		delete(c.procs, n)
	}
}

// kill sends SIGKILL: the manager and its zfs processes die at once.
func (c *volumeCluster) kill(n replica.Node) {
	if cmd, ok := c.procs[n]; ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		delete(c.procs, n)
	}
}

func (c *volumeCluster) statusOf(n replica.Node) (replication.Status, error) {
	var s replication.Status
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/status", c.status[n]))
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (c *volumeCluster) eventually(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	c.eventuallyProgressing(what, timeout, cond, nil)
}

// eventuallyProgressing is eventually whose deadline starts again each
// time progress() says something new (a transfer's bytes growing): a
// slow machine (the OpenZFS lane's emulated guest moves a couple of MB/s)
// gets the time its transfers take, a stuck one fails after timeout, and
// none waits more than ten times timeout in all (transfers that keep
// restarting show new bytes too).
func (c *volumeCluster) eventuallyProgressing(what string, timeout time.Duration, cond func() bool, progress func() string) {
	c.t.Helper()
	timeout *= timeScale
	deadline, limit := time.Now().Add(timeout), time.Now().Add(10*timeout)
	last := ""
	for !cond() {
		if progress != nil {
			if p := progress(); p != last {
				last, deadline = p, time.Now().Add(timeout)
				if deadline.After(limit) {
					deadline = limit
				}
			}
		}
		if time.Now().After(deadline) {
			st, _ := c.state.Get(ctx, c.id)
			for n, p := range c.logs {
				c.t.Logf("---- %s log (tail):\n%s", n, tail(p, 15))
			}
			c.t.Fatalf("timed out (%s without progress, or ten times that in all) waiting until %s; state %+v", timeout, what, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// logHas reports whether node's log holds a line containing all of words.
func (c *volumeCluster) logHas(n replica.Node, words ...string) bool {
	b, _ := os.ReadFile(c.logs[n])
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			return true
		}
	}
	return false
}

// logEntries are node's log lines that contain all of words, decoded
// (zap's JSON: durations in seconds), in the order they were written.
func (c *volumeCluster) logEntries(n replica.Node, words ...string) []map[string]any {
	b, _ := os.ReadFile(c.logs[n])
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		var e map[string]any
		if all && json.Unmarshal([]byte(line), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// mountPath is where node's copy of the volume is mounted.
func (c *volumeCluster) mountPath(n replica.Node) (string, bool) {
	info, err := stores[n].GetVolume(ctx, c.id)
	if err != nil {
		return "", false
	}
	return info.MountPath, true
}

// write writes size bytes of random data into file on node's copy.
func (c *volumeCluster) write(n replica.Node, file string, size int64) {
	c.t.Helper()
	dir, ok := c.mountPath(n)
	if !ok {
		c.t.Fatalf("%s holds no copy of %s", n, c.id)
	}
	out, err := exec.Command("dd", "if=/dev/urandom", "of="+filepath.Join(dir, file), "bs=1M",
		fmt.Sprintf("count=%d", max(1, size>>20)), "status=none").CombinedOutput()
	if err != nil {
		c.t.Fatalf("dd: %v: %s", err, out)
	}
}

// checksum hashes every file of node's copy (names and contents).
func (c *volumeCluster) checksum(n replica.Node) (string, bool) {
	dir, ok := c.mountPath(n)
	if !ok {
		return "", false
	}
	var names []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	h := sha256.New()
	for _, p := range names {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", false
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], true
}

// converged waits until every listed node's copy has the primary's
// checksum as of its newest snapshot: the primary must not be writing.
func (c *volumeCluster) converged(primary replica.Node, others ...replica.Node) string {
	c.t.Helper()
	want, ok := c.checksum(primary)
	if !ok {
		c.t.Fatalf("primary %s holds no copy", primary)
	}
	c.eventuallyProgressing(fmt.Sprintf("%v hold %s's data (checksum %s)", others, primary, want), 90*time.Second, func() bool {
		for _, n := range others {
			if got, ok := c.checksum(n); !ok || got != want {
				return false
			}
		}
		return true
	}, func() string {
		// What each receiver holds and how far its transfer has come.
		var b strings.Builder
		for _, n := range others {
			if s, err := c.statusOf(n); err == nil {
				fmt.Fprintf(&b, "%s:%d", n, s.Snapshot)
				if s.Transfer != nil {
					fmt.Fprintf(&b, "+%d", s.Transfer.Bytes)
				}
				b.WriteString(" ")
			}
		}
		return b.String()
	})
	return want
}

var sigterm = syscall.SIGTERM

// newestStored is the newest replication snapshot n's store holds of the
// volume (0 when none).
func (c *volumeCluster) newestStored(n replica.Node) replica.Snap {
	list, err := stores[n].ListSnapshots(ctx, c.id)
	if err != nil {
		return replica.Snap{}
	}
	var newest replica.Snap
	for _, s := range list {
		if num, epoch, ok := replica.ParseSnapshotName(s.Name); ok {
			if sn := (replica.Snap{Number: num, Epoch: epoch, GUID: s.GUID}); sn.Newer(newest) {
				newest = sn
			}
		}
	}
	return newest
}
