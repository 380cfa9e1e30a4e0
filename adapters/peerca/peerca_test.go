package peerca

import (
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
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// testCA is a CA written to files, as a mounted Secret holds it.
type testCA struct {
	cert     *x509.Certificate
	key      crypto.Signer
	certFile string
	keyFile  string
}

type caSpec struct {
	notAfter time.Time
	notCA    bool
	keyType  string // "PKCS8" (default), "EC", "RSA"
}

func writeCA(t *testing.T, dir string, s caSpec) *testCA {
	t.Helper()
	var key crypto.Signer
	var err error
	if s.keyType == "RSA" {
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	} else {
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s.notAfter.IsZero() {
		s.notAfter = time.Now().Add(365 * 24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "ferry peer CA " + dir},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              s.notAfter,
		IsCA:                  !s.notCA,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	var keyBlock *pem.Block
	switch s.keyType {
	case "EC":
		b, _ := x509.MarshalECPrivateKey(key.(*ecdsa.PrivateKey))
		keyBlock = &pem.Block{Type: "EC PRIVATE KEY", Bytes: b}
	case "RSA":
		keyBlock = &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key.(*rsa.PrivateKey))}
	default:
		b, _ := x509.MarshalPKCS8PrivateKey(key)
		keyBlock = &pem.Block{Type: "PRIVATE KEY", Bytes: b}
	}
	ca := &testCA{cert: cert, key: key, certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	if err := os.WriteFile(ca.certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca.keyFile, pem.EncodeToMemory(keyBlock), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

func csrFor(t *testing.T, key crypto.Signer, cn string, org []string) []byte {
	t.Helper()
	u, _ := url.Parse(identity.URI(cn))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn, Organization: org}, DNSNames: []string{identity.ServerName}, URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func ecKey(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("not one PEM certificate: %q", b)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verify checks c is a peer certificate of ca for server and client use.
func verify(t *testing.T, c *x509.Certificate, ca *x509.Certificate) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}, DNSName: identity.ServerName}); err != nil {
			t.Errorf("the certificate does not verify against the CA for %v: %v", u, err)
		}
	}
}

func TestASignedCertificateNamesExactlyWhatWasAskedForServerAndClient(t *testing.T) {
	ca := writeCA(t, t.TempDir(), caSpec{})
	s := New(ca.certFile, ca.keyFile)
	csr := csrFor(t, ecKey(t), "node-a", []string{"system:masters"})
	before := time.Now()
	out, err := s.Sign(context.Background(), csr, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, out)
	verify(t, c, ca.cert)
	if c.Subject.String() != "CN=node-a" {
		t.Errorf("subject %s, want the common name alone", c.Subject)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != identity.URI("node-a") || !slices.Equal(c.DNSNames, []string{identity.ServerName}) || len(c.IPAddresses)+len(c.EmailAddresses) != 0 {
		t.Errorf("names %v %v %v %v", c.URIs, c.DNSNames, c.IPAddresses, c.EmailAddresses)
	}
	if node, ok := identity.NodeOf([]string{c.URIs[0].String()}); !ok || node != "node-a" {
		t.Errorf("NodeOf the certificate: %q %v", node, ok)
	}
	if c.IsCA || !c.BasicConstraintsValid {
		t.Error("the certificate is a CA's, or says nothing of it")
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("key usage %b, want digital signature alone for an ECDSA key", c.KeyUsage)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("extended key usage %v", c.ExtKeyUsage)
	}
	if string(c.AuthorityKeyId) != string(ca.cert.SubjectKeyId) || len(c.AuthorityKeyId) == 0 {
		t.Errorf("authority key id %x, want the CA's %x", c.AuthorityKeyId, ca.cert.SubjectKeyId)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() < 100 {
		t.Errorf("serial %v, want a random 128-bit one", c.SerialNumber)
	}
	if d := before.Add(-Backdate).Sub(c.NotBefore); d < -2*time.Second || d > 2*time.Second {
		t.Errorf("valid from %s, want %s before the signing", c.NotBefore, Backdate)
	}
	if d := c.NotAfter.Sub(c.NotBefore); d < 2*time.Hour+Backdate-2*time.Second || d > 2*time.Hour+Backdate+2*time.Second {
		t.Errorf("valid for %s, want 2h from the signing", d)
	}
	again, err := s.Sign(context.Background(), csr, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if parseCert(t, again).SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Error("two certificates with one serial")
	}
	if na, err := s.NotAfter(context.Background()); err != nil || !na.Equal(ca.cert.NotAfter) {
		t.Errorf("NotAfter: %v %v, want %v", na, err, ca.cert.NotAfter)
	}
}

func TestKeysAreSignedByKindAndStrength(t *testing.T) {
	ca := writeCA(t, t.TempDir(), caSpec{keyType: "RSA"})
	s := New(ca.certFile, ca.keyFile)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	out, err := s.Sign(context.Background(), csrFor(t, rsa2048, "node-a", nil), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := parseCert(t, out)
	verify(t, c, ca.cert)
	if c.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("key usage %b, want digital signature and key encipherment for an RSA key", c.KeyUsage)
	}
	out, err = s.Sign(context.Background(), csrFor(t, ed, "node-a", nil), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, parseCert(t, out), ca.cert)
	for name, key := range map[string]crypto.Signer{"RSA 1024": rsa1024, "ECDSA P-224": p224} {
		if _, err := s.Sign(context.Background(), csrFor(t, key, "node-a", nil), time.Hour); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestARequestThatIsNoSignedCSRIsInvalid(t *testing.T) {
	ca := writeCA(t, t.TempDir(), caSpec{})
	s := New(ca.certFile, ca.keyFile)
	tampered := csrFor(t, ecKey(t), "node-a", nil)
	block, _ := pem.Decode(tampered)
	block.Bytes[len(block.Bytes)-3] ^= 0x55
	for name, csr := range map[string][]byte{
		"tampered":   pem.EncodeToMemory(block),
		"not PEM":    []byte("node-a"),
		"a key":      []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
		"no request": []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"),
	} {
		if _, err := s.Sign(context.Background(), csr, time.Hour); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func TestNoCertificateOutlivesTheCA(t *testing.T) {
	ca := writeCA(t, t.TempDir(), caSpec{notAfter: time.Now().Add(3 * time.Hour)})
	s := New(ca.certFile, ca.keyFile)
	out, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if c := parseCert(t, out); c.NotAfter.After(ca.cert.NotAfter) {
		t.Errorf("valid until %s, past the CA's %s", c.NotAfter, ca.cert.NotAfter)
	}
	s.now = func() time.Time { return ca.cert.NotAfter.Add(time.Second) }
	if _, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour); err == nil || errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("signing with an expired CA: %v, want an error saying so (not the request's fault)", err)
	}
}

// A CA rotated in its files signs from the next request.
func TestARotatedCASignsFromTheNextRequest(t *testing.T) {
	dir := t.TempDir()
	old := writeCA(t, dir, caSpec{})
	s := New(old.certFile, old.keyFile)
	out, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, parseCert(t, out), old.cert)
	renewed := writeCA(t, dir, caSpec{keyType: "EC", notAfter: time.Now().Add(100 * 24 * time.Hour)})
	out, err = s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, parseCert(t, out), renewed.cert)
	if na, _ := s.NotAfter(context.Background()); !na.Equal(renewed.cert.NotAfter) {
		t.Errorf("NotAfter %v, want the new CA's %v", na, renewed.cert.NotAfter)
	}
}

// Files that do not make a CA sign nothing, and say why; the request is
// not at fault (no ErrInvalid).
func TestFilesThatAreNoCASignNothing(t *testing.T) {
	other := writeCA(t, t.TempDir(), caSpec{})
	notCA := writeCA(t, t.TempDir(), caSpec{notCA: true})
	good := writeCA(t, t.TempDir(), caSpec{})
	for name, tc := range map[string]struct{ cert, key, says string }{
		"not a CA":         {notCA.certFile, notCA.keyFile, "not a CA's"},
		"another CA's key": {good.certFile, other.keyFile, "is not the key of the certificate"},
		"no certificate":   {filepath.Join(t.TempDir(), "tls.crt"), good.keyFile, "read the peer CA certificate"},
		"no key":           {good.certFile, filepath.Join(t.TempDir(), "tls.key"), "read the peer CA key"},
		"key as cert":      {good.keyFile, good.keyFile, "holds no PEM block CERTIFICATE"},
		"cert as key":      {good.certFile, good.certFile, "holds no PEM private key"},
	} {
		s := New(tc.cert, tc.key)
		_, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour)
		if err == nil || errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: Sign: %v, want an error saying %q", name, err, tc.says)
		}
		if _, err := s.NotAfter(context.Background()); err == nil {
			t.Errorf("%s: NotAfter read no error", name)
		}
	}
	// A CA that was good and is no longer: nothing signed with the old
	// one either.
	s := New(good.certFile, good.keyFile)
	if _, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(other.keyFile)
	if err := os.WriteFile(good.keyFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sign(context.Background(), csrFor(t, ecKey(t), "node-a", nil), time.Hour); err == nil {
		t.Error("signed with a key that is no longer the certificate's")
	}
}
