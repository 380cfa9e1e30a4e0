// Package replicactl is ports.ReplicaControl over unix sockets: each
// volume manager listens on a socket named for its node and volume in a
// directory of the node that only root can enter, and the node plugin
// talks HTTP to it. Nothing here decides: the server hands each request
// to the volume manager (replication.Replicator), the client maps the
// answers to the port's errors.
package replicactl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// maxSocketPath is the longest path a unix socket may have (sun_path
// holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// MaxWait bounds the wait a request may ask for.
const MaxWait = 2 * time.Minute

// SocketPath is where node's volume manager of id listens: a fixed-length
// name (a socket path is limited to 107 bytes), distinct per node, since
// several test nodes may share one host directory.
func SocketPath(dir string, node replica.Node, id volume.ID) string {
	sum := sha256.Sum256([]byte(string(node) + "\x00" + string(id)))
	return filepath.Join(dir, hex.EncodeToString(sum[:16])+".sock")
}

// Manager is what the server needs of a volume manager (replication.Replicator).
type Manager interface {
	Acquire(ctx context.Context) error
	ReleaseAndWait(ctx context.Context) error
}

// Listen creates dir (mode 0700) if missing and listens on the volume
// manager's socket there (mode 0600), replacing a stale socket left by a
// previous process (a socket nobody answers on); a socket another live
// process answers on is refused.
func Listen(dir string, node replica.Node, id volume.ID) (net.Listener, error) {
	path := SocketPath(dir, node, id)
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("control socket %s: longer than a socket path may be (%d bytes): use a shorter --control-dir", path, maxSocketPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control directory %s: %w", dir, err)
	}
	// A directory that existed keeps its mode with MkdirAll: tighten it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("control directory %s: %w", dir, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("control socket %s: another volume manager of %s answers there", path, id)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control socket %s: remove the stale one: %w", path, err)
		}
	}
	// Bound under a temporary name, restricted, then renamed into place:
	// the socket is never reachable at its name with a wider mode.
	tmp := path + ".new"
	_ = os.Remove(tmp)
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return l, nil
}

// Handler serves POST /acquire?wait=D and POST /release?wait=D for m: 200
// when done, 409 with the reason when the wait ran out (the volume manager
// stopped acquiring), 400 for a bad request.
func Handler(m Manager) http.Handler {
	mux := http.NewServeMux()
	serve := func(do func(context.Context) error) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			wait, err := parseWait(req.URL.Query().Get("wait"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(req.Context(), wait)
			defer cancel()
			if err := do(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		}
	}
	mux.HandleFunc("POST /acquire", serve(m.Acquire))
	mux.HandleFunc("POST /release", serve(m.ReleaseAndWait))
	return mux
}

func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 30 * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxWait {
		return 0, fmt.Errorf("wait %q: a duration above 0 and at most %s", s, MaxWait)
	}
	return d, nil
}

// Client is ports.ReplicaControl for the volume managers of node.
type Client struct {
	dir  string
	node replica.Node
}

var _ ports.ReplicaControl = (*Client)(nil)

// NewClient returns a client of the sockets in dir.
func NewClient(dir string, node replica.Node) *Client { return &Client{dir: dir, node: node} }

// Acquire implements ports.ReplicaControl.
func (c *Client) Acquire(ctx context.Context, id volume.ID, wait time.Duration) error {
	return c.call(ctx, id, "acquire", wait)
}

// Release implements ports.ReplicaControl.
func (c *Client) Release(ctx context.Context, id volume.ID, wait time.Duration) error {
	return c.call(ctx, id, "release", wait)
}

func (c *Client) call(ctx context.Context, id volume.ID, op string, wait time.Duration) error {
	wait = min(max(wait, time.Second), MaxWait)
	path := SocketPath(c.dir, c.node, id)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}
	// The server answers within wait; a little more for the answer itself.
	ctx, cancel := context.WithTimeout(ctx, wait+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://volume-manager/"+op+"?wait="+wait.String(), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("no volume manager of volume %s runs on %s (%s): %w", id, c.node, path, ports.ErrNotFound)
		}
		return fmt.Errorf("volume manager of volume %s on %s: %s: %v: %w", id, c.node, op, err, ports.ErrUnavailable)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return fmt.Errorf("%s: %w", msg, ports.ErrNotPrimary)
	default:
		return fmt.Errorf("volume manager of volume %s on %s: %s: %s %s: %w", id, c.node, op, resp.Status, msg, ports.ErrUnavailable)
	}
}
