// Package peerca is ports.PeerCA on files: Ferry's peer CA certificate
// and its key, such as the Secret ferry-peer-ca (tls.crt, tls.key)
// mounted in the controller's pod. The files are read at every use and
// parsed again when their contents changed, so a CA rotated in the Secret
// (the kubelet swaps the mounted files) signs from the next request, with
// no restart.
package peerca

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"

	"github.com/ferry-csi/ferry/ports"
)

// Backdate is how long before its signing a certificate is valid from:
// a node whose clock is a little behind the controller's takes it as
// valid at once.
const Backdate = 5 * time.Minute

// minRSABits is the smallest RSA key signed.
const minRSABits = 2048

// CA signs with the CA certificate and key in two files.
type CA struct {
	certFile, keyFile string
	now               func() time.Time

	mu     sync.Mutex
	raw    [2][]byte // the files' contents as last parsed
	cert   *x509.Certificate
	signer crypto.Signer
}

var _ ports.PeerCA = (*CA)(nil)

// New returns the CA of certFile (PEM: the CA certificate first; a chain
// may follow it) and keyFile (PEM: its private key, PKCS#1, SEC 1 or
// PKCS#8). Nothing is read before the first use.
func New(certFile, keyFile string) *CA {
	return &CA{certFile: certFile, keyFile: keyFile, now: time.Now}
}

// NotAfter is when the CA certificate expires.
func (c *CA) NotAfter(context.Context) (time.Time, error) {
	cert, _, err := c.load()
	if err != nil {
		return time.Time{}, err
	}
	return cert.NotAfter, nil
}

// Sign issues a certificate for csr, valid from Backdate before now for
// lifetime from now, and never past the CA's own expiry: the request's
// common name (nothing else of its subject), DNS names and URIs, for
// server and client use, a random serial, not a CA.
func (c *CA) Sign(_ context.Context, csrPEM []byte, lifetime time.Duration) ([]byte, error) {
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, err
	}
	usage := x509.KeyUsageDigitalSignature
	switch k := csr.PublicKey.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("the request's RSA key has %d bits, %d at least are signed: %w", k.N.BitLen(), minRSABits, ports.ErrInvalid)
		}
		// An RSA key also encrypts TLS key exchanges.
		usage |= x509.KeyUsageKeyEncipherment
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() && k.Curve != elliptic.P521() {
			return nil, fmt.Errorf("the request's ECDSA key is on curve %s: only P-256, P-384 and P-521 are signed: %w", k.Curve.Params().Name, ports.ErrInvalid)
		}
	case ed25519.PublicKey:
	default:
		return nil, fmt.Errorf("the request's key is a %T: only RSA, ECDSA and Ed25519 keys are signed: %w", csr.PublicKey, ports.ErrInvalid)
	}
	if lifetime <= 0 {
		return nil, fmt.Errorf("a certificate valid for %s cannot be issued", lifetime)
	}
	ca, signer, err := c.load()
	if err != nil {
		return nil, err
	}
	now := c.now()
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("the peer CA %s expired at %s: renew it", c.certFile, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("draw a serial number: %w", err)
	}
	serial.SetBit(serial, 127, 1) // 128 bits, never zero
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: csr.Subject.CommonName},
		DNSNames:              csr.DNSNames,
		URIs:                  csr.URIs,
		NotBefore:             now.Add(-Backdate),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		AuthorityKeyId:        ca.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, csr.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("sign with the peer CA %s: %w", c.certFile, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// parseCSR reads a PEM PKCS#10 request and checks its signature; every
// error is ErrInvalid.
func parseCSR(b []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("the request holds no PEM block CERTIFICATE REQUEST: %w", ports.ErrInvalid)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the certificate request cannot be read: %v: %w", err, ports.ErrInvalid)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request is not signed by the key it names: %v: %w", err, ports.ErrInvalid)
	}
	return csr, nil
}

// load reads both files and returns the CA they hold, parsed again only
// when their contents changed. Files that do not make a CA (unreadable,
// the certificate no CA, the key not the certificate's, as when the two
// are caught half-way through a rotation) are an error: nothing is signed
// until they do.
func (c *CA) load() (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("read the peer CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("read the peer CA key: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && bytes.Equal(certPEM, c.raw[0]) && bytes.Equal(keyPEM, c.raw[1]) {
		return c.cert, c.signer, nil
	}
	cert, err := parseCA(c.certFile, certPEM)
	if err != nil {
		return nil, nil, err
	}
	signer, err := parseKey(c.keyFile, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("the peer CA key %s is not the key of the certificate %s (a rotation half done?)", c.keyFile, c.certFile)
	}
	c.raw, c.cert, c.signer = [2][]byte{certPEM, keyPEM}, cert, signer
	return cert, signer, nil
}

// parseCA is the first certificate of a PEM file, which must be a CA's.
func parseCA(file string, b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("the peer CA certificate %s holds no PEM block CERTIFICATE", file)
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("the peer CA certificate %s cannot be read: %w", file, err)
		}
		if !cert.BasicConstraintsValid || !cert.IsCA {
			return nil, fmt.Errorf("the peer CA certificate %s (%s) is not a CA's (basic constraints CA:TRUE needed)", file, cert.Subject)
		}
		if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
			return nil, fmt.Errorf("the peer CA certificate %s (%s) may not sign certificates (key usage cert sign needed)", file, cert.Subject)
		}
		return cert, nil
	}
}

// parseKey is the private key of a PEM file.
func parseKey(file string, b []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("the peer CA key %s holds no PEM private key", file)
		}
		var key any
		var err error
		switch block.Type {
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		default:
			continue // EC PARAMETERS, and the like
		}
		if err != nil {
			return nil, fmt.Errorf("the peer CA key %s cannot be read: %w", file, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, errors.New("the peer CA key " + file + " is of a kind that cannot sign")
		}
		return signer, nil
	}
}
