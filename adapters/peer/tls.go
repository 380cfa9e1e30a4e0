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
)

// TLSFiles locate a node's peer certificate, its key and the CA that signs
// every node's certificate (mounted from a Kubernetes Secret).
type TLSFiles struct {
	Cert, Key, CA string
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
const DefaultServerName = "ferry-peer"

// keyring is the node's peer certificate and CA pool as the files hold
// them now. A Secret's files are replaced when the Secret is renewed
// (cert-manager, or by hand); every handshake reads them again if their
// contents changed, so a renewed certificate or CA bundle is used without
// a restart, and a connection made before keeps what it was made with. A
// renewal that is not a good pair (half written, expired, not signed by
// the CA) does not replace a pair still good: the last good one stays
// until the files hold a good pair again, and OnReject hears why.
type keyring struct {
	files TLSFiles

	mu   sync.Mutex
	raw  [3][]byte // cert, key, CA as last loaded
	cert tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
	// rejected is the content last refused (reported once).
	rejected [3][]byte
}

func newKeyring(f TLSFiles) (*keyring, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, errors.New("peer TLS needs a certificate, a key and a CA file (or --insecure-peer in tests)")
	}
	k := &keyring{files: f}
	if _, _, err := k.current(); err != nil {
		return nil, err
	}
	return k, nil
}

// current returns the certificate and pool, loading them again when the
// files' contents changed.
func (k *keyring) current() (tls.Certificate, *x509.CertPool, error) {
	var raw [3][]byte
	var readErr error
	for i, p := range []string{k.files.Cert, k.files.Key, k.files.CA} {
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
	cert, leaf, pool, err := parse(k.files, raw, readErr)
	if err == nil && k.pool != nil && usable(k.leaf, k.pool) {
		// A renewal replaces a pair still good only with a good one.
		if verr := check(leaf, pool); verr != nil {
			err = fmt.Errorf("peer certificate %s: %w", k.files.Cert, verr)
		}
	}
	if err != nil {
		if k.pool == nil {
			return tls.Certificate{}, nil, err
		}
		if k.files.OnReject != nil && !(bytes.Equal(raw[0], k.rejected[0]) && bytes.Equal(raw[1], k.rejected[1]) && bytes.Equal(raw[2], k.rejected[2])) {
			k.files.OnReject(fmt.Errorf("renewed peer TLS files not taken, the earlier ones stay in use (until %s): %w", k.leaf.NotAfter.Format(time.RFC3339), err))
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

func parse(f TLSFiles, raw [3][]byte, readErr error) (tls.Certificate, *x509.Certificate, *x509.CertPool, error) {
	if readErr != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer TLS files: %w", readErr)
	}
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer certificate %s: %w", f.Cert, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer certificate %s: %w", f.Cert, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return tls.Certificate{}, nil, nil, fmt.Errorf("peer CA %s holds no PEM certificate", f.CA)
	}
	return cert, leaf, pool, nil
}

// ServerTLS are the server's credentials: it presents its certificate and
// requires a client certificate signed by the CA, both as the files hold
// them at each handshake.
func ServerTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	k, err := newKeyring(f)
	if err != nil {
		return nil, err
	}
	return &reloading{keys: k, server: true}, nil
}

// ClientTLS are the client's credentials: it presents its certificate and
// verifies the server's against the CA and ServerName, both as the files
// hold them at each handshake.
func ClientTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	k, err := newKeyring(f)
	if err != nil {
		return nil, err
	}
	name := f.ServerName
	if name == "" {
		name = DefaultServerName
	}
	return &reloading{keys: k, name: name}, nil
}

// reloading is gRPC transport credentials made afresh, from the keyring,
// for every handshake (gRPC's own TLS credentials copy one configuration
// for ever).
type reloading struct {
	keys   *keyring
	server bool
	name   string
}

func (r *reloading) creds() (credentials.TransportCredentials, error) {
	cert, pool, err := r.keys.current()
	if err != nil {
		return nil, err
	}
	if r.server {
		return credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS13,
		}), nil
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   r.name,
		MinVersion:   tls.VersionTLS13,
	}), nil
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
