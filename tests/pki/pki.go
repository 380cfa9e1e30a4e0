// Package pki makes throw-away certificate authorities and peer
// certificates for tests of Ferry's mutual-TLS peer transport.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/ferry-csi/ferry/domain/identity"
)

// CA is a certificate authority whose files live in a directory.
type CA struct {
	Dir    string
	CAFile string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
}

// Files are one node's certificate, key and CA.
type Files struct{ Cert, Key, CA string }

// NewCA makes a CA named name in dir.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Dir: dir, CAFile: filepath.Join(dir, name+"-ca.crt"), cert: cert, key: key}
	return ca, writePEM(ca.CAFile, "CERTIFICATE", der)
}

// Issue makes a peer certificate with the common name node, valid for
// server and client use, with the SANs "ferry-peer", localhost and
// 127.0.0.1, and no node identity: the shared certificate.
func (ca *CA) Issue(node string) (Files, error) {
	return ca.IssueUntil(node, time.Now().Add(24*time.Hour))
}

// WriteKey writes the CA's private key to path (PEM), for a signer.
func (ca *CA) WriteKey(path string) error {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

// IssueNode is Issue with node's identity (domain/identity): its URI, as
// Ferry's signer issues a node's own certificate.
func (ca *CA) IssueNode(node string) (Files, error) {
	u, err := url.Parse(identity.URI(node))
	if err != nil {
		return Files{}, err
	}
	return ca.issue(node, time.Now().Add(24*time.Hour), []*url.URL{u})
}

// IssueUntil is Issue with the certificate's end of validity (in the
// past: an expired certificate). It writes node's files again.
func (ca *CA) IssueUntil(node string, notAfter time.Time) (Files, error) {
	return ca.issue(node, notAfter, nil)
}

func (ca *CA) issue(node string, notAfter time.Time, uris []*url.URL) (Files, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    notAfter.Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"ferry-peer", "localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Files{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(ca.Dir, node+".crt"), Key: filepath.Join(ca.Dir, node+".key"), CA: ca.CAFile}
	if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
		return Files{}, err
	}
	return f, writePEM(f.Key, "EC PRIVATE KEY", kder)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
