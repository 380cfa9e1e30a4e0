package peer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

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

func (f TLSFiles) load() (tls.Certificate, *x509.CertPool, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return tls.Certificate{}, nil, errors.New("peer TLS needs a certificate, a key and a CA file (or --insecure-peer in tests)")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("peer certificate: %w", err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("peer CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("peer CA %s holds no PEM certificate", f.CA)
	}
	return cert, pool, nil
}

// ServerTLS are the server's credentials: it presents its certificate and
// requires a client certificate signed by the CA.
func ServerTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}), nil
}

// ClientTLS are the client's credentials: it presents its certificate and
// verifies the server's against the CA and ServerName.
func ClientTLS(f TLSFiles) (credentials.TransportCredentials, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	name := f.ServerName
	if name == "" {
		name = DefaultServerName
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   name,
		MinVersion:   tls.VersionTLS13,
	}), nil
}
