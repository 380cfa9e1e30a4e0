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

	"google.golang.org/grpc/credentials"
)

// TLSFiles locate a node's peer certificate, its key and the CA that signs
// every node's certificate (mounted from a Kubernetes Secret).
type TLSFiles struct {
	Cert, Key, CA string
	// ServerName is the name every peer certificate carries (a SAN), so
	// that peers can be dialled by IP address.
	ServerName string
}

// DefaultServerName is the SAN Ferry's peer certificates carry.
const DefaultServerName = "ferry-peer"

// keyring is the node's peer certificate and CA pool as the files hold
// them now. A Secret's files are replaced when the Secret is renewed
// (cert-manager, or by hand); every handshake reads them again if their
// contents changed, so a renewed certificate or CA bundle is used without
// a restart, and a connection made before keeps what it was made with. A
// renewal that fails to parse (a half-written pair) keeps the last good
// one until the files hold a good pair again.
type keyring struct {
	files TLSFiles

	mu   sync.Mutex
	raw  [3][]byte // cert, key, CA as last loaded
	cert tls.Certificate
	pool *x509.CertPool
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
	cert, pool, err := parse(k.files, raw, readErr)
	if err != nil {
		if k.pool == nil {
			return tls.Certificate{}, nil, err
		}
		return k.cert, k.pool, nil // the last good pair
	}
	k.raw, k.cert, k.pool = raw, cert, pool
	return cert, pool, nil
}

func parse(f TLSFiles, raw [3][]byte, readErr error) (tls.Certificate, *x509.CertPool, error) {
	if readErr != nil {
		return tls.Certificate{}, nil, fmt.Errorf("peer TLS files: %w", readErr)
	}
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("peer certificate %s: %w", f.Cert, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return tls.Certificate{}, nil, fmt.Errorf("peer CA %s holds no PEM certificate", f.CA)
	}
	return cert, pool, nil
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
