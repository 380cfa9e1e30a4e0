package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	grpcpeer "google.golang.org/grpc/peer"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/domain/replica"
)

// TLSFiles locate a node's peer certificate, its key and the CA that signs
// every node's certificate (mounted from a Kubernetes Secret).
type TLSFiles struct {
	Cert, Key, CA string
	// NodeCert and NodeKey locate the node's own certificate, naming it
	// (domain/identity: Ferry's signer issues it, app/identity keeps it
	// renewed): presented whenever the files hold a good pair, the
	// shared Cert and Key otherwise (a node not enrolled yet). Either
	// pair may be left empty, not both.
	NodeCert, NodeKey string
	// RequireNode refuses every peer whose certificate names no node
	// (the shared certificate, all a release before per-node identities
	// presents, and a node's until it enrolled): set once every node and
	// volume manager runs this one. Without it such a peer is served and
	// dialled as before per-node identities, a promise included; a peer
	// whose certificate names a node is that node either way.
	RequireNode bool
	// ServerName is the name every peer certificate carries (a SAN), so
	// that peers can be dialled by IP address.
	ServerName string
	// OnReject (nil: nothing) hears, once per content, why renewed files
	// were not taken (unreadable, a key that is not the certificate's, a
	// certificate expired or not signed by the CA): the last good pair
	// stays in use meanwhile, and would otherwise expire unannounced.
	OnReject func(error)
}

// DefaultServerName is the SAN Ferry's peer certificates carry.
const DefaultServerName = identity.ServerName

// keyring is the node's peer certificate and CA pool as the files hold
// them now. A Secret's files are replaced when the Secret is renewed
// (cert-manager, or by hand); every handshake reads them again if their
// contents changed, so a renewed certificate or CA bundle is used without
// a restart, and a connection made before keeps what it was made with. A
// renewal that is not a good pair (half written, expired, not signed by
// the CA) does not replace a pair still good: the last good one stays
// until the files hold a good pair again, and OnReject hears why.
type keyring struct {
	cert0, key0, ca string // the files
	onReject        func(error)

	mu   sync.Mutex
	raw  [3][]byte // cert, key, CA as last loaded
	cert tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
	// rejected is the content last refused (reported once).
	rejected [3][]byte
}

// rings are the keyrings of f: the node's own pair (nil: none named) and
// the shared one (nil: none named). The shared pair must load now; the
// node's may come later (the daemon enrolls after it starts).
func rings(f TLSFiles) (node, shared *keyring, err error) {
	if f.CA == "" {
		return nil, nil, errors.New("peer TLS needs a CA file (or --insecure-peer in tests)")
	}
	if (f.NodeCert == "") != (f.NodeKey == "") || (f.Cert == "") != (f.Key == "") || (f.Cert == "" && f.NodeCert == "") {
		return nil, nil, errors.New("peer TLS needs a certificate and its key: the node's own, the shared one, or both (or --insecure-peer in tests)")
	}
	if f.NodeCert != "" {
		node = &keyring{cert0: f.NodeCert, key0: f.NodeKey, ca: f.CA, onReject: f.OnReject}
	}
	if f.Cert != "" {
		shared = &keyring{cert0: f.Cert, key0: f.Key, ca: f.CA, onReject: f.OnReject}
		if _, _, err := shared.current(); err != nil {
			return nil, nil, err
		}
	}
	return node, shared, nil
}

// current returns the certificate and pool, loading them again when the
// files' contents changed.
func (k *keyring) current() (tls.Certificate, *x509.CertPool, error) {
	var raw [3][]byte
	var readErr error
	for i, p := range []string{k.cert0, k.key0, k.ca} {
		b, err := os.ReadFile(p)
		if err != nil && readErr == nil {
			readErr = err
		}
		raw[i] = b
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if readErr == nil && bytes.Equal(raw[0], k.raw[0]) && bytes.Equal(raw[1], k.raw[1]) && bytes.Equal(raw[2], k.raw[2]) {
		return k.cert, k.pool, nil
	}
	cert, leaf, pool, err := parse(k.cert0, k.ca, raw, readErr)
	if err == nil && k.pool != nil && usable(k.leaf, k.pool) {
		// A renewal replaces a pair still good only with a good one.
		if verr := check(leaf, pool); verr != nil {
			err = fmt.Errorf("peer certificate %s: %w", k.cert0, verr)
		}
	}
	if err != nil {
		if k.pool == nil {
			return tls.Certificate{}, nil, err
		}
		if k.onReject != nil && !(bytes.Equal(raw[0], k.rejected[0]) && bytes.Equal(raw[1], k.rejected[1]) && bytes.Equal(raw[2], k.rejected[2])) {
			k.onReject(fmt.Errorf("renewed peer TLS files not taken, the earlier ones stay in use (until %s): %w", k.leaf.NotAfter.Format(time.RFC3339), err))
		}
		k.rejected = raw
		return k.cert, k.pool, nil // the last good pair
	}
	k.raw, k.cert, k.leaf, k.pool = raw, cert, leaf, pool
	return cert, pool, nil
}

// check says why leaf is no certificate to present: not valid now, or
// not signed by the CA in pool.
func check(leaf *x509.Certificate, pool *x509.CertPool) error {
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("valid from %s to %s, not now", leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: now}); err != nil {
		return fmt.Errorf("not signed by the CA: %w", err)
	}
	return nil
}

func usable(leaf *x509.Certificate, pool *x509.CertPool) bool {
	return leaf != nil && check(leaf, pool) == nil
}

func parse(certFile, caFile string, raw [3][]byte, readErr error) (tls.Certificate, *x509.Certificate, *x509.CertPool, error) {
	if readErr != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer TLS files: %w", readErr)
	}
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer certificate %s: %w", certFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer certificate %s: %w", certFile, err)
	}
	cert.Leaf = leaf
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer CA %s holds no PEM certificate", caFile)
	}
	return cert, leaf, pool, nil
}

// ServerTLS are the server's credentials: it presents its certificate and
// requires a client certificate signed by the CA, both as the files hold
// them at each handshake.
func ServerTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	node, shared, err := rings(f)
	if err != nil {
		return nil, err
	}
	return &reloading{node: node, shared: shared, server: true, require: f.RequireNode}, nil
}

// ClientTLS are the client's credentials: it presents its certificate and
// verifies the server's against the CA and ServerName, both as the files
// hold them at each handshake.
func ClientTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	node, shared, err := rings(f)
	if err != nil {
		return nil, err
	}
	name := f.ServerName
	if name == "" {
		name = DefaultServerName
	}
	return &reloading{node: node, shared: shared, name: name, require: f.RequireNode}, nil
}

// reloading is gRPC transport credentials made afresh, from the keyrings,
// for every handshake (gRPC's own TLS credentials copy one configuration
// for ever).
type reloading struct {
	node, shared *keyring
	server       bool
	name         string
	require      bool
	// expect is the node a client dials (forNode): a server whose
	// certificate names another node is refused.
	expect replica.Node
}

// pair is the certificate to present: the node's own while its files
// hold a good one, else the shared one.
func (r *reloading) pair() (tls.Certificate, *x509.CertPool, error) {
	var nodeErr error
	if r.node != nil {
		cert, pool, err := r.node.current()
		if err == nil {
			if err = check(cert.Leaf, pool); err == nil {
				if _, ok := identity.NodeOf(uriStrings(cert.Leaf)); ok {
					return cert, pool, nil
				}
				err = fmt.Errorf("peer certificate %s names no node", r.node.cert0)
			}
		}
		nodeErr = err
	}
	if r.shared == nil {
		return tls.Certificate{}, nil, fmt.Errorf("no peer certificate of this node yet: %w", nodeErr)
	}
	return r.shared.current()
}

func (r *reloading) creds() (credentials.TransportCredentials, error) {
	cert, pool, err := r.pair()
	if err != nil {
		return nil, err
	}
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return nil // the server side requires one; a client always gets one
		}
		n, named := identity.NodeOf(uriStrings(cs.PeerCertificates[0]))
		switch {
		case named && r.expect != "" && replica.Node(n) != r.expect:
			return fmt.Errorf("the peer dialled as node %s presents the certificate of node %s", r.expect, n)
		case !named && r.require:
			return fmt.Errorf("the peer's certificate (%s) names no node, and a node identity is required", cs.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	if r.server {
		return credentials.NewTLS(&tls.Config{
			Certificates:     []tls.Certificate{cert},
			ClientCAs:        pool,
			ClientAuth:       tls.RequireAndVerifyClientCert,
			MinVersion:       tls.VersionTLS13,
			VerifyConnection: verify,
		}), nil
	}
	return credentials.NewTLS(&tls.Config{
		Certificates:     []tls.Certificate{cert},
		RootCAs:          pool,
		ServerName:       r.name,
		MinVersion:       tls.VersionTLS13,
		VerifyConnection: verify,
	}), nil
}

// forNode are the client's credentials for dialling node: a server that
// names another node is refused.
func (r *reloading) forNode(node replica.Node) credentials.TransportCredentials {
	c := *r
	c.expect = node
	return &c
}

func (r *reloading) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, err := r.creds()
	if err != nil {
		return nil, nil, err
	}
	return c.ClientHandshake(ctx, authority, conn)
}

func (r *reloading) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, err := r.creds()
	if err != nil {
		return nil, nil, err
	}
	return c.ServerHandshake(conn)
}

func (r *reloading) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", ServerName: r.name}
}

func (r *reloading) Clone() credentials.TransportCredentials {
	c := *r
	return &c
}

// OverrideServerName is gRPC's deprecated hook; the name is fixed by
// TLSFiles.ServerName.
func (r *reloading) OverrideServerName(name string) error {
	r.name = name
	return nil
}

func uriStrings(c *x509.Certificate) []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.URIs))
	for i, u := range c.URIs {
		out[i] = u.String()
	}
	return out
}

// NodeOf is the node the peer of an RPC is, as its certificate names it:
// false for a peer whose certificate names none (or no TLS at all).
func NodeOf(ctx context.Context) (replica.Node, bool) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "", false
	}
	return nodeOfAuth(p.AuthInfo)
}

func nodeOfAuth(a credentials.AuthInfo) (replica.Node, bool) {
	ti, ok := a.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return "", false
	}
	n, ok := identity.NodeOf(uriStrings(ti.State.PeerCertificates[0]))
	return replica.Node(n), ok
}
