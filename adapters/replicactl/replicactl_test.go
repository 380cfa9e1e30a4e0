package replicactl_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/adapters/replicactl"
	"github.com/ferry-csi/ferry/ports"
)

type manager struct {
	acquire, release func(ctx context.Context) error
}

func (m manager) Acquire(ctx context.Context) error        { return m.acquire(ctx) }
func (m manager) ReleaseAndWait(ctx context.Context) error { return m.release(ctx) }

func serve(t *testing.T, dir string, m manager) {
	t.Helper()
	l, err := replicactl.Listen(dir, "node-1", "pvc-1")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: replicactl.Handler(m)}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

var ctx = context.Background()

func TestTheClientReachesTheVolumeManagerOfItsNodeAndVolume(t *testing.T) {
	dir := filepath.Join(shortDir(t), "control")
	var waited time.Duration
	serve(t, dir, manager{
		acquire: func(ctx context.Context) error {
			dl, _ := ctx.Deadline()
			waited = time.Until(dl).Round(time.Second)
			return nil
		},
		release: func(ctx context.Context) error {
			<-ctx.Done()
			return errors.New("final snapshot not recorded: " + ctx.Err().Error())
		},
	})
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("control directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	sock, err := os.Stat(replicactl.SocketPath(dir, "node-1", "pvc-1"))
	if err != nil || sock.Mode().Perm() != 0o600 || sock.Mode()&os.ModeSocket == 0 {
		t.Fatalf("control socket: %v %v, want a socket of mode 0600", sock.Mode(), err)
	}
	c := replicactl.NewClient(dir, "node-1")
	if err := c.Acquire(ctx, "pvc-1", 7*time.Second); err != nil {
		t.Fatal(err)
	}
	if waited != 7*time.Second {
		t.Fatalf("the server waited up to %s, the client asked 7s", waited)
	}
	err = c.Release(ctx, "pvc-1", time.Second)
	if !errors.Is(err, ports.ErrNotPrimary) || !strings.Contains(err.Error(), "final snapshot not recorded") {
		t.Fatalf("a release that ran out of time: %v, want ErrNotPrimary with the reason", err)
	}
	// Another volume, or the same volume of another node: nobody there.
	if err := c.Acquire(ctx, "pvc-2", time.Second); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("no volume manager of pvc-2: %v, want ErrNotFound", err)
	}
	if err := replicactl.NewClient(dir, "node-2").Acquire(ctx, "pvc-1", time.Second); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("node-2's socket: %v, want ErrNotFound", err)
	}
}

func TestListenReplacesAStaleSocketButNotALiveOne(t *testing.T) {
	dir := shortDir(t)
	path := replicactl.SocketPath(dir, "node-1", "pvc-1")
	// A socket left by a process that died: nobody answers.
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	serve(t, dir, manager{acquire: func(context.Context) error { return nil }})
	if err := replicactl.NewClient(dir, "node-1").Acquire(ctx, "pvc-1", time.Second); err != nil {
		t.Fatalf("after replacing the stale socket: %v", err)
	}
	if _, err := replicactl.Listen(dir, "node-1", "pvc-1"); err == nil {
		t.Fatal("a second volume manager took over a live socket")
	}
	// A regular file in the way is not removed.
	other := replicactl.SocketPath(dir, "node-1", "pvc-2")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := replicactl.Listen(dir, "node-1", "pvc-2"); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "x" {
		t.Fatalf("the file in the way was touched: %q %v", b, err)
	}
}

func TestTheServerRefusesAWaitOutOfBounds(t *testing.T) {
	called := false
	h := replicactl.Handler(manager{acquire: func(context.Context) error { called = true; return nil }})
	for _, w := range []string{"-1s", "0s", "1h", "soon"} {
		rec := &recorder{header: http.Header{}}
		req, _ := http.NewRequest(http.MethodPost, "/acquire?wait="+w, nil)
		h.ServeHTTP(rec, req)
		if rec.code != http.StatusBadRequest {
			t.Errorf("wait=%s: %d, want 400", w, rec.code)
		}
	}
	if called {
		t.Fatal("a bad request reached the volume manager")
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }

// shortDir is a temporary directory with a path short enough for sockets.
func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "rc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// A control directory that existed with a wider mode is tightened.
func TestListenTightensAnExistingControlDirectory(t *testing.T) {
	dir := filepath.Join(shortDir(t), "c")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	l, err := replicactl.Listen(dir, "n", "v")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("control directory: %v %v, want mode 0700", fi.Mode(), err)
	}
}

func TestListenRefusesASocketPathTooLong(t *testing.T) {
	if _, err := replicactl.Listen("/tmp/"+strings.Repeat("d", 80), "n", "v"); err == nil || !strings.Contains(err.Error(), "shorter --control-dir") {
		t.Fatalf("an overlong socket path: %v", err)
	}
}
