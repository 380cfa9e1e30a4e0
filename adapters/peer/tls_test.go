package peer_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/domain/replica"
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
