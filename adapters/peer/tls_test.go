package peer_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/pki"
)

// serveWith serves a volume with creds on 127.0.0.1 and returns a
// function that lists its snapshots through a new client with ccreds (a
// new connection each time: a handshake each time).
func serveWith(t *testing.T, screds, ccreds credentials.TransportCredentials) func() error {
	t.Helper()
	srv := peer.NewServer(withVolume(t, []byte("x")), screds, zap.NewNop())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return func() error {
		c := peer.NewClient(func(replica.Node) (string, error) { return l.Addr().String(), nil }, ccreds)
		defer c.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Snapshots(cctx, "node-a", "vol-1")
		return err
	}
}

func tlsFiles(f pki.Files) peer.TLSFiles { return peer.TLSFiles{Cert: f.Cert, Key: f.Key, CA: f.CA} }

// A node's certificate expires and is renewed in its Secret's files: the
// next connection presents the renewed one, with no restart.
func TestARenewedCertificateIsUsedWithoutARestart(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.Issue("node-a")
	cli, err := ca.IssueUntil("node-b", time.Now().Add(-time.Minute)) // expired
	if err != nil {
		t.Fatal(err)
	}
	screds, err := peer.ServerTLS(tlsFiles(srv))
	if err != nil {
		t.Fatal(err)
	}
	var rejected []error
	cfiles := tlsFiles(cli)
	cfiles.OnReject = func(err error) { rejected = append(rejected, err) }
	ccreds, err := peer.ClientTLS(cfiles)
	if err != nil {
		t.Fatal(err)
	}
	list := serveWith(t, screds, ccreds)
	if err := list(); err == nil {
		t.Fatal("an expired client certificate was accepted")
	}
	if _, err := ca.IssueUntil("node-b", time.Now().Add(time.Hour)); err != nil { // renewed in place
		t.Fatal(err)
	}
	if err := list(); err != nil {
		t.Fatalf("the renewed certificate was not used: %v", err)
	}
	// A half-written renewal (a key that is not the certificate's) keeps
	// the last good pair.
	other, _ := ca.Issue("node-c")
	key, _ := os.ReadFile(other.Key)
	if err := os.WriteFile(cli.Key, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := list(); err != nil {
		t.Fatalf("a mismatched renewal replaced the good pair: %v", err)
	}
	// An expired renewal does not replace a pair still good either.
	if _, err := ca.IssueUntil("node-b", time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := list(); err != nil {
			t.Fatalf("an expired renewal replaced the good pair: %v", err)
		}
	}
	if len(rejected) != 2 {
		t.Fatalf("rejections heard %v: want one per refused content (the mismatched key, the expired certificate)", rejected)
	}
}

// The CA is rotated: the server's bundle gains the new CA in its file, and
// a node with a certificate of the new CA is accepted, with no restart.
func TestARotatedCABundleIsTrustedWithoutARestart(t *testing.T) {
	dir := t.TempDir()
	oldCA, err := pki.NewCA(dir, "old")
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA(t.TempDir(), "new")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := oldCA.Issue("node-a")
	cli, _ := newCA.Issue("node-b")
	// The client trusts both (its bundle was rotated first).
	bundle := t.TempDir() + "/bundle.crt"
	oldPEM, _ := os.ReadFile(oldCA.CAFile)
	newPEM, _ := os.ReadFile(newCA.CAFile)
	if err := os.WriteFile(bundle, append(append([]byte{}, oldPEM...), newPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	screds, err := peer.ServerTLS(tlsFiles(srv))
	if err != nil {
		t.Fatal(err)
	}
	ccreds, err := peer.ClientTLS(peer.TLSFiles{Cert: cli.Cert, Key: cli.Key, CA: bundle})
	if err != nil {
		t.Fatal(err)
	}
	list := serveWith(t, screds, ccreds)
	if err := list(); err == nil {
		t.Fatal("a certificate of a CA the server does not trust yet was accepted")
	}
	if err := os.WriteFile(srv.CA, append(append([]byte{}, oldPEM...), newPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := list(); err != nil {
		t.Fatalf("the rotated bundle was not trusted: %v", err)
	}
}

// servePromises serves with screds on 127.0.0.1, granting every promise,
// and returns a client with ccreds that resolves every node to it.
func servePromises(t *testing.T, screds, ccreds credentials.TransportCredentials) *peer.Client {
	t.Helper()
	srv := peer.NewServer(withVolume(t, []byte("x")), screds, zap.NewNop())
	srv.SetPromiser(func(replica.Node) (bool, time.Duration) { return true, time.Second })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c := peer.NewClient(func(replica.Node) (string, error) { return l.Addr().String(), nil }, ccreds)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Every node has its own certificate naming it: a promise is granted only
// to the node it names, and a peer reached at an address that turns out
// to be another node's is refused. The shared certificate (a node not
// enrolled yet, a pod of a release before: a roll mixes both) is answered
// as before node identities, and not at all where they are required.
func TestAPeerIsTheNodeItsCertificateNames(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.IssueNode("node-a")
	b, _ := ca.IssueNode("node-b")
	shared, _ := ca.Issue("ferry-peer")
	creds := func(f pki.Files, server, require bool) credentials.TransportCredentials {
		tf := tlsFiles(f)
		tf.RequireNode = require
		var c credentials.TransportCredentials
		var err error
		if server {
			c, err = peer.ServerTLS(tf)
		} else {
			c, err = peer.ClientTLS(tf)
		}
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	named := servePromises(t, creds(a, true, false), creds(b, false, false))
	if ok, _, err := named.Promise(ctx, "node-a", "node-b"); !ok || err != nil {
		t.Fatalf("node-b asking node-a for itself: %v %v", ok, err)
	}
	if ok, _, err := named.Promise(ctx, "node-a", "node-c"); ok || !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("node-b asking node-a for node-c: %v %v, want refused", ok, err)
	}
	if _, err := named.Snapshots(ctx, "node-c", "vol-1"); err == nil {
		t.Fatal("node-a's server was taken for node-c")
	}

	// The shared certificate, as a node not enrolled yet or a pod of a
	// release before presents it: answered as before node identities,
	// unless they are required.
	legacyClient := servePromises(t, creds(a, true, false), creds(shared, false, false))
	if _, err := legacyClient.Snapshots(ctx, "node-a", "vol-1"); err != nil {
		t.Fatalf("a peer with the shared certificate, during a roll, listing snapshots: %v", err)
	}
	if ok, _, err := legacyClient.Promise(ctx, "node-a", "node-b"); !ok || err != nil {
		t.Fatalf("a promise asked with the shared certificate, node identities not required: %v %v", ok, err)
	}
	legacyServer := servePromises(t, creds(shared, true, false), creds(b, false, false))
	if ok, _, err := legacyServer.Promise(ctx, "node-a", "node-b"); !ok || err != nil {
		t.Fatalf("a grant from a server with the shared certificate, node identities not required: %v %v", ok, err)
	}
	if ok, _, err := servePromises(t, creds(shared, true, false), creds(b, false, true)).Promise(ctx, "node-a", "node-b"); ok || err == nil {
		t.Fatalf("a grant from a server with the shared certificate, node identities required: %v %v, want refused", ok, err)
	}
	if ok, _, err := servePromises(t, creds(a, true, true), creds(shared, false, false)).Promise(ctx, "node-a", "node-b"); ok || err == nil {
		t.Fatalf("a promise asked with the shared certificate, node identities required: %v %v, want refused", ok, err)
	}

	strict := servePromises(t, creds(a, true, true), creds(shared, false, false))
	if _, err := strict.Snapshots(ctx, "node-a", "vol-1"); err == nil {
		t.Fatal("a server requiring node identities served the shared certificate")
	}
	strictClient := servePromises(t, creds(shared, true, false), creds(b, false, true))
	if _, err := strictClient.Snapshots(ctx, "node-a", "vol-1"); err == nil {
		t.Fatal("a client requiring node identities dialled a server with the shared certificate")
	}
}

// The node's own certificate is presented once its files hold one (the
// daemon enrolls after it starts), the shared one until then; with no
// shared one configured, nothing is presented until the node's comes.
func TestTheNodesOwnCertificateIsPresentedOnceItIsThere(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.IssueNode("node-a")
	shared, _ := ca.Issue("ferry-peer")
	dir := t.TempDir()
	nodeCert, nodeKey := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	screds, err := peer.ServerTLS(peer.TLSFiles{Cert: srv.Cert, Key: srv.Key, CA: srv.CA, RequireNode: true})
	if err != nil {
		t.Fatal(err)
	}
	withShared, err := peer.ClientTLS(peer.TLSFiles{Cert: shared.Cert, Key: shared.Key, NodeCert: nodeCert, NodeKey: nodeKey, CA: srv.CA})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := peer.ClientTLS(peer.TLSFiles{NodeCert: nodeCert, NodeKey: nodeKey, CA: srv.CA})
	if err != nil {
		t.Fatalf("credentials before the node's certificate exists: %v", err)
	}
	listShared, listAlone := serveWith(t, screds, withShared), serveWith(t, screds, alone)
	if listShared() == nil || listAlone() == nil {
		t.Fatal("a server requiring node identities accepted a client without one")
	}
	b, _ := ca.IssueNode("node-b")
	for from, to := range map[string]string{b.Cert: nodeCert, b.Key: nodeKey} {
		raw, _ := os.ReadFile(from)
		if err := os.WriteFile(to, raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := listShared(); err != nil {
		t.Fatalf("the node's certificate, once written, was not presented: %v", err)
	}
	if err := listAlone(); err != nil {
		t.Fatalf("the node's certificate, once written, was not presented: %v", err)
	}
}

// A node pair that is no good (expired, or of a CA the peers do not
// trust) is not presented: the shared one is, until a good one is there.
func TestABadNodePairFallsBackToTheSharedOne(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir(), "ferry-test")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(t.TempDir(), "other")
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := ca.IssueNode("node-a")
	shared, _ := ca.Issue("ferry-peer")
	expired, _ := ca.IssueUntil("node-b", time.Now().Add(-time.Minute))
	foreign, _ := other.IssueNode("node-b")
	screds, err := peer.ServerTLS(tlsFiles(srv))
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]pki.Files{"expired": expired, "of another CA": foreign} {
		ccreds, err := peer.ClientTLS(peer.TLSFiles{Cert: shared.Cert, Key: shared.Key, NodeCert: bad.Cert, NodeKey: bad.Key, CA: srv.CA})
		if err != nil {
			t.Fatal(err)
		}
		if err := serveWith(t, screds, ccreds)(); err != nil {
			t.Errorf("a node pair %s was presented instead of the shared one: %v", name, err)
		}
	}
}
