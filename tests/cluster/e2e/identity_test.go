//go:build cluster

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/adapters/peer"
	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// Issue 23 point 6: every node's daemon obtained its own peer certificate
// from Ferry's signer (through the certificates API), naming its node and
// signed by the peer CA, kept in the control directory its volume
// managers share; its peer service presents it; and a peer holding one
// node's certificate may not ask a promise for another node.
func TestEveryNodePresentsItsOwnPeerCertificate(t *testing.T) {
	nodes := strings.Fields(must(t, "", "get", "nodes", "-o", `jsonpath={.items[*].metadata.name}`))
	if len(nodes) < 2 {
		t.Fatalf("nodes %v: the test needs two", nodes)
	}
	caPEM, err := base64.StdEncoding.DecodeString(strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "secret", "ferry-peer-tls", "-o", `jsonpath={.data.ca\.crt}`)))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the ferry-peer-tls Secret's ca.crt holds no certificate")
	}
	dir := filepath.Join(envOr("FERRY_E2E_DIR", "/var/lib/ferry-e2e"), "control", "peer-identity")
	for _, n := range nodes {
		f := filepath.Join(dir, n, "tls.crt")
		var cert *x509.Certificate
		eventually(t, "the peer certificate of "+n, 60*time.Second, func() (bool, string) {
			raw, err := os.ReadFile(f)
			if err != nil {
				return false, err.Error()
			}
			b, _ := pem.Decode(raw)
			if b == nil {
				return false, f + " holds no PEM block"
			}
			cert, err = x509.ParseCertificate(b.Bytes)
			return err == nil, fmt.Sprint(err)
		})
		uris := make([]string, len(cert.URIs))
		for i, u := range cert.URIs {
			uris[i] = u.String()
		}
		if got, ok := identity.NodeOf(uris); !ok || got != n || cert.Subject.CommonName != n {
			t.Fatalf("%s's certificate names %q (CN %q), not %s", n, uris, cert.Subject.CommonName, n)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("%s's certificate is not the peer CA's for server and client use: %v", n, err)
		}
		if st, err := os.Stat(filepath.Join(dir, n, "tls.key")); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s's key: %v %v, want mode 0600", n, st.Mode(), err)
		}
	}
	// The first node's identity dials every node's peer service.
	addr := map[replica.Node]string{}
	for _, line := range strings.Split(strings.TrimSpace(must(t, "", "-n", "ferry-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o",
		`jsonpath={range .items[*]}{.spec.nodeName}={.status.podIP}{"\n"}{end}`)), "\n") {
		n, ip, _ := strings.Cut(line, "=")
		addr[replica.Node(n)] = ip + ":7443"
	}
	self := nodes[0]
	creds, err := peer.ClientTLS(peer.TLSFiles{NodeCert: filepath.Join(dir, self, "tls.crt"), NodeKey: filepath.Join(dir, self, "tls.key"),
		CA: writeTemp(t, caPEM), RequireNode: true})
	if err != nil {
		t.Fatal(err)
	}
	c := peer.NewClient(func(n replica.Node) (string, error) {
		if a, ok := addr[n]; ok {
			return a, nil
		}
		return "", fmt.Errorf("no daemon pod on %s", n)
	}, creds)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		// A volume no node holds: the answer (not found) proves the
		// handshake, in which the server presented a certificate naming
		// n (the client refuses another's, and one naming none).
		if _, err := c.Snapshots(ctx, replica.Node(n), "pvc-00000000-0000-0000-0000-000000000000"); err != nil && !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("%s's peer service, dialled as %s with %s's certificate: %v", n, n, self, err)
		}
		other := nodes[1] // not self
		if ok, _, err := c.Promise(ctx, replica.Node(n), replica.Node(other)); ok || !errors.Is(err, ports.ErrNotOwned) {
			t.Fatalf("%s's certificate asking %s a promise for %s: granted %v, %v; want refused", self, n, other, ok, err)
		}
	}
}

func writeTemp(t *testing.T, b []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}
