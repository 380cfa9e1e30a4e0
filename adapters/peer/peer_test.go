package peer_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/pki"
)

var ctx = context.Background()

type env struct {
	src, dst *memstore.Store
	client   *peer.Client
	logs     *observer.ObservedLogs
	ca       *pki.CA
	addr     string
	srv      *peer.Server
}

// start serves store on 127.0.0.1 with mutual TLS and returns a client
// whose every node resolves to it.
func start(t *testing.T, store ports.SnapshotStore) *env { return startB(t, store) }

func startB(t testing.TB, store ports.SnapshotStore) *env {
	t.Helper()
	ca, err := pki.NewCA(t.TempDir(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	srvFiles, _ := ca.IssueNode("node-a")
	cliFiles, _ := ca.IssueNode("node-b")
	screds, err := peer.ServerTLS(peer.TLSFiles{Cert: srvFiles.Cert, Key: srvFiles.Key, CA: srvFiles.CA})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	srv := peer.NewServer(store, screds, zap.New(core))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	ccreds, err := peer.ClientTLS(peer.TLSFiles{Cert: cliFiles.Cert, Key: cliFiles.Key, CA: cliFiles.CA})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	client := peer.NewClient(func(replica.Node) (string, error) { return addr, nil }, ccreds)
	t.Cleanup(func() { _ = client.Close() })
	return &env{client: client, logs: logs, ca: ca, addr: addr, srv: srv}
}

func withVolume(t *testing.T, content []byte) *memstore.Store {
	t.Helper()
	s := memstore.New(t.TempDir(), 10<<30, 1)
	info, err := s.CreateVolume(ctx, "vol-1", ports.CreateOptions{CapacityBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "data"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ferry-1-1", "csi-user-snap"} {
		if _, err := s.CreateSnapshot(ctx, "vol-1", name, nil); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestSnapshotsListsOnlyReplicationSnapshots(t *testing.T) {
	e := start(t, withVolume(t, []byte("x")))
	list, err := e.client.Snapshots(ctx, "node-a", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "ferry-1-1" || list[0].GUID == 0 {
		t.Fatalf("Snapshots = %+v; want only ferry-1-1 with its GUID", list)
	}
	if _, err := e.client.Snapshots(ctx, "node-a", "nope"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("missing volume: %v, want ErrNotFound", err)
	}
}

// A restore on another node: the CSI snapshots are listed when asked
// for (and only then), and one is fetched whole.
func TestCSISnapshotsAreListedApartAndFetchedWhole(t *testing.T) {
	src := withVolume(t, []byte("restore me"))
	if _, err := src.CreateSnapshot(ctx, "vol-1", "not-ferrys", nil); err != nil {
		t.Fatal(err)
	}
	e := start(t, src)
	list, err := e.client.CSISnapshots(ctx, "node-a", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "csi-user-snap" || list[0].Volume != "vol-1" {
		t.Fatalf("CSISnapshots = %+v; want only csi-user-snap", list)
	}
	r, err := e.client.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "csi-user-snap"})
	if err != nil {
		t.Fatal(err)
	}
	dst := memstore.New(t.TempDir(), 10<<30, 2)
	if err := dst.Receive(ctx, "restored", r); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	info, _ := dst.GetVolume(ctx, "restored")
	if got, err := os.ReadFile(filepath.Join(info.MountPath, "data")); err != nil || string(got) != "restore me" {
		t.Fatalf("restored %q (%v)", got, err)
	}
	if _, err := e.client.CSISnapshots(ctx, "node-a", "nope"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("missing volume: %v, want ErrNotFound", err)
	}
}

func TestFetchStreamsASnapshotIntoAnotherStoreOverMutualTLS(t *testing.T) {
	content := bytes.Repeat([]byte("ferry peer stream "), 300_000) // ~5 MiB: several chunks
	src := withVolume(t, content)
	e := start(t, src)
	r, err := e.client.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"})
	if err != nil {
		t.Fatal(err)
	}
	dst := memstore.New(t.TempDir(), 10<<30, 2)
	if err := dst.Receive(ctx, "vol-1", r); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	info, _ := dst.GetVolume(ctx, "vol-1")
	got, err := os.ReadFile(filepath.Join(info.MountPath, "data"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("received %d bytes (%v), want %d equal bytes", len(got), err, len(content))
	}
	a, _ := src.ListSnapshots(ctx, "vol-1")
	b, _ := dst.ListSnapshots(ctx, "vol-1")
	if len(b) != 1 || b[0].GUID != a[0].GUID {
		t.Fatalf("received snapshots %+v, want ferry-1 with GUID %d", b, a[0].GUID)
	}
	var sent bool
	for _, entry := range e.logs.All() {
		if entry.Message == "snapshot sent" {
			sent = true
		}
	}
	if !sent {
		t.Fatal("the server logged no 'snapshot sent' line with bytes and rate")
	}
}

// notOwned answers ErrNotOwned for every volume, as the ZFS store does for
// a dataset without Ferry's mark.
type notOwned struct{ ports.SnapshotStore }

func (notOwned) ListSnapshots(context.Context, volume.ID) ([]ports.SnapshotInfo, error) {
	return nil, fmt.Errorf("dataset: %w", ports.ErrNotOwned)
}

func (notOwned) Send(context.Context, ports.SendRequest) (io.ReadCloser, error) {
	return nil, fmt.Errorf("dataset: %w", ports.ErrNotOwned)
}

func TestThePeerServiceRefusesForeignDatasetsAndHostileNamesAndLogsIt(t *testing.T) {
	e := start(t, notOwned{withVolume(t, []byte("x"))})
	cases := []struct {
		name string
		req  ports.SendRequest
		want error
	}{
		{"a dataset Ferry does not own", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"}, ports.ErrNotOwned},
		{"a path with ../", ports.SendRequest{Volume: "../../etc", To: "ferry-1-1"}, ports.ErrInvalid},
		{"another pool's dataset", ports.SendRequest{Volume: "tank/secret", To: "ferry-1-1"}, ports.ErrInvalid},
		{"a snapshot that is neither a replication nor a CSI snapshot", ports.SendRequest{Volume: "vol-1", To: "user-snap"}, ports.ErrInvalid},
		{"a CSI snapshot asked as an increment", ports.SendRequest{Volume: "vol-1", From: "ferry-1-1", To: "csi-user-snap"}, ports.ErrInvalid},
		{"a CSI snapshot with a resume token", ports.SendRequest{Volume: "vol-1", To: "csi-user-snap", ResumeToken: "1-abc"}, ports.ErrInvalid},
		{"a CSI snapshot name with a path", ports.SendRequest{Volume: "vol-1", To: "csi-../../x"}, ports.ErrInvalid},
		{"a CSI snapshot of a dataset Ferry does not own", ports.SendRequest{Volume: "vol-1", To: "csi-user-snap"}, ports.ErrNotOwned},
		{"a base with shell metacharacters", ports.SendRequest{Volume: "vol-1", From: "ferry-1-1;rm -rf /", To: "ferry-1-2"}, ports.ErrInvalid},
		{"a malformed resume token", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1", ResumeToken: "$(reboot)"}, ports.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.logs.FilterMessage("peer request refused").Len()
			_, err := e.client.Fetch(ctx, "node-a", c.req)
			if !errors.Is(err, c.want) {
				t.Fatalf("Fetch(%+v) = %v, want %v", c.req, err, c.want)
			}
			refused := e.logs.FilterMessage("peer request refused")
			if refused.Len() != before+1 {
				t.Fatalf("refusal not logged")
			}
			if who := refused.All()[refused.Len()-1].ContextMap()["peer"]; who == nil || !bytes.Contains([]byte(fmt.Sprint(who)), []byte("node-b")) {
				t.Fatalf("refusal logged without the peer's certificate name: %v", who)
			}
		})
	}
}

func TestPeersWithoutACertificateFromTheCAAreRefused(t *testing.T) {
	e := start(t, withVolume(t, []byte("x")))
	other, _ := pki.NewCA(t.TempDir(), "intruder")
	intruder, _ := other.Issue("intruder")
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(e.ca.CAFile)
	pool.AppendCertsFromPEM(caPEM)
	cert, _ := tls.LoadX509KeyPair(intruder.Cert, intruder.Key)
	clients := map[string]credentials.TransportCredentials{
		"no client certificate":        credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "ferry-peer", MinVersion: tls.VersionTLS13}),
		"a certificate of another CA":  credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "ferry-peer", Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}),
		"plaintext to the TLS service": nil,
	}
	for name, creds := range clients {
		t.Run(name, func(t *testing.T) {
			c := peer.NewClient(func(replica.Node) (string, error) { return e.addr, nil }, creds)
			defer c.Close()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := c.Snapshots(cctx, "node-a", "vol-1"); err == nil {
				t.Fatal("an unauthenticated peer listed snapshots")
			}
		})
	}
}

// endless is a store whose stream never ends and records when it is closed.
type endless struct {
	ports.SnapshotStore
	closed atomic.Bool
}

func (e *endless) Send(context.Context, ports.SendRequest) (io.ReadCloser, error) {
	return &endlessReader{owner: e}, nil
}

type endlessReader struct{ owner *endless }

func (r *endlessReader) Read(p []byte) (int, error) {
	if r.owner.closed.Load() {
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

func (r *endlessReader) Close() error { r.owner.closed.Store(true); return nil }

func TestClosingAFetchStopsTheSendersStream(t *testing.T) {
	store := &endless{SnapshotStore: memstore.New(t.TempDir(), 1<<30, 1)}
	e := start(t, store)
	r, err := e.client.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r, make([]byte, 3*peer.ChunkSize)); err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !store.closed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the sender's stream (its zfs send) was not closed after the receiver went away")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A node that cannot renew its lease asks its peers for promises over
// mutual TLS: the server answers with its observer's word, only to the
// node asking for itself (its certificate names it), refuses a name that
// is no node's, and promises nothing without an observer.
func TestAPromiseIsAskedOverThePeerChannel(t *testing.T) {
	e := start(t, withVolume(t, []byte("x")))
	if ok, _, err := e.client.Promise(ctx, "node-a", "node-b"); ok || err != nil {
		t.Fatalf("without an observer: %v %v, want refused", ok, err)
	}
	var asked []replica.Node
	grant := true
	e.srv.SetPromiser(func(n replica.Node) (bool, time.Duration) {
		asked = append(asked, n)
		return grant, 4 * time.Second
	})
	if ok, span, err := e.client.Promise(ctx, "node-a", "node-b"); !ok || span != 4*time.Second || err != nil {
		t.Fatalf("promise: %v %s %v", ok, span, err)
	}
	grant = false
	if ok, _, err := e.client.Promise(ctx, "node-a", "node-b"); ok || err != nil {
		t.Fatalf("refused promise: %v %v", ok, err)
	}
	// node-b's certificate asking for node-c: an impersonation.
	if ok, _, err := e.client.Promise(ctx, "node-a", "node-c"); ok || !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("node-b asking a promise for node-c: %v %v, want refused as not its own", ok, err)
	}
	if _, _, err := e.client.Promise(ctx, "node-a", "../../etc"); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a hostile name: %v, want ErrInvalid", err)
	}
	if len(asked) != 2 || asked[0] != "node-b" || asked[1] != "node-b" {
		t.Fatalf("the observer was asked for %v", asked)
	}
}

// A CSI snapshot leaves its node only for a peer whose certificate names
// a node (a daemon restoring it), not for the shared certificate every
// volume manager mounts; replication snapshots are served to both.
func TestCSISnapshotsAreRefusedToTheSharedCertificate(t *testing.T) {
	e := start(t, withVolume(t, []byte("x")))
	shared, err := e.ca.Issue("ferry-peer")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := peer.ClientTLS(peer.TLSFiles{Cert: shared.Cert, Key: shared.Key, CA: shared.CA})
	if err != nil {
		t.Fatal(err)
	}
	c := peer.NewClient(func(replica.Node) (string, error) { return e.addr, nil }, creds)
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.CSISnapshots(ctx, "node-a", "vol-1"); !errors.Is(err, ports.ErrNotOwned) || !strings.Contains(err.Error(), "names its node") {
		t.Fatalf("CSISnapshots with the shared certificate: %v, want refused", err)
	}
	if _, err := c.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "csi-user-snap"}); !errors.Is(err, ports.ErrNotOwned) || !strings.Contains(err.Error(), "names its node") {
		t.Fatalf("Fetch of a CSI snapshot with the shared certificate: %v, want refused", err)
	}
	if list, err := c.Snapshots(ctx, "node-a", "vol-1"); err != nil || len(list) != 1 {
		t.Fatalf("replication snapshots with the shared certificate: %v, %v", list, err)
	}
}
