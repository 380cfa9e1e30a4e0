// Command certgen writes the local test cluster's certificates and keys into
// a directory: a CA, the apiserver's serving certificate, client certificates
// (admin, controller-manager, scheduler, the apiserver's kubelet client, one
// per node as system:node:NAME in system:nodes), one kubelet serving
// certificate per node, the service-account key pair, and the front proxy's
// CA and client certificate (the apiserver's request-header authentication). A file already there
// is kept, so running it twice changes nothing; a missing CA regenerates all.
//
//	certgen -dir /var/lib/ferry-e2e/pki -apiserver-ip 10.213.0.1 \
//	  -service-ip 10.215.0.1 -node node1=10.213.0.11 -node node2=10.213.0.12
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// validity is long enough for any test run, short enough to be obviously
// throw-away.
const validity = 30 * 24 * time.Hour

type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func main() {
	var nodes list
	dir := flag.String("dir", "", "output directory")
	apiserverIP := flag.String("apiserver-ip", "", "the apiserver's address (bridge)")
	serviceIP := flag.String("service-ip", "", "the kubernetes service's cluster IP")
	flag.Var(&nodes, "node", "NAME=IP of a node (repeatable)")
	flag.Parse()
	if *dir == "" || *apiserverIP == "" || *serviceIP == "" {
		log.Fatal("certgen: -dir, -apiserver-ip and -service-ip are required")
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		log.Fatal(err)
	}
	if err := run(*dir, *apiserverIP, *serviceIP, nodes); err != nil {
		log.Fatalf("certgen: %v", err)
	}
}

func run(dir, apiserverIP, serviceIP string, nodes []string) error {
	p := func(name string) string { return filepath.Join(dir, name) }
	if !exists(p("ca.crt")) || !exists(p("ca.key")) {
		// A new CA invalidates everything it signed.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = os.Remove(p(e.Name()))
		}
	}
	authority, err := loadOrMakeCA(p("ca.crt"), p("ca.key"), "ferry-e2e-ca")
	if err != nil {
		return err
	}
	type want struct {
		name   string
		cn     string
		orgs   []string
		server bool
		ips    []string
		dns    []string
	}
	wants := []want{
		{name: "apiserver", cn: "kube-apiserver", server: true,
			ips: []string{apiserverIP, "127.0.0.1", serviceIP},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", orgs: []string{"system:masters"}},
		{name: "admin", cn: "ferry-e2e-admin", orgs: []string{"system:masters"}},
		{name: "controller-manager", cn: "system:kube-controller-manager"},
		{name: "scheduler", cn: "system:kube-scheduler"},
	}
	for _, n := range nodes {
		name, ip, ok := strings.Cut(n, "=")
		if !ok || net.ParseIP(ip) == nil {
			return fmt.Errorf("-node %q: want NAME=IP", n)
		}
		wants = append(wants,
			want{name: "kubelet-" + name + "-client", cn: "system:node:" + name, orgs: []string{"system:nodes"}},
			want{name: "kubelet-" + name + "-serving", cn: "system:node:" + name, orgs: []string{"system:nodes"},
				server: true, ips: []string{ip}, dns: []string{name}})
	}
	for _, w := range wants {
		if exists(p(w.name+".crt")) && exists(p(w.name+".key")) {
			continue
		}
		if err := authority.issue(p(w.name), w.cn, w.orgs, w.server, w.ips, w.dns); err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
	}
	// The aggregation layer's front proxy: a CA of its own (kubeadm's
	// layout), so that no client certificate of the main CA can pass for it.
	if !exists(p("front-proxy-ca.crt")) || !exists(p("front-proxy-ca.key")) {
		_ = os.Remove(p("front-proxy-client.crt"))
	}
	frontProxy, err := loadOrMakeCA(p("front-proxy-ca.crt"), p("front-proxy-ca.key"), "ferry-e2e-front-proxy-ca")
	if err != nil {
		return err
	}
	if !exists(p("front-proxy-client.crt")) || !exists(p("front-proxy-client.key")) {
		if err := frontProxy.issue(p("front-proxy-client"), "front-proxy-client", nil, false, nil, nil); err != nil {
			return fmt.Errorf("front-proxy-client: %w", err)
		}
	}
	if !exists(p("sa.key")) || !exists(p("sa.pub")) {
		if err := serviceAccountKeys(p("sa.key"), p("sa.pub")); err != nil {
			return err
		}
	}
	return nil
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func loadOrMakeCA(certFile, keyFile, name string) (*ca, error) {
	if exists(certFile) && exists(keyFile) {
		cert, err := readCert(certFile)
		if err != nil {
			return nil, err
		}
		key, err := readECKey(keyFile)
		if err != nil {
			return nil, err
		}
		return &ca{cert: cert, key: key}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(validity),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if err := writeKey(keyFile, key); err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key}, writePEM(certFile, "CERTIFICATE", der, 0o644)
}

func (c *ca) issue(base, cn string, orgs []string, server bool, ips, dns []string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return err
	}
	if err := writeKey(base+".key", key); err != nil {
		return err
	}
	return writePEM(base+".crt", "CERTIFICATE", der, 0o644)
}

// serviceAccountKeys writes the RSA key pair that signs service-account tokens.
func serviceAccountKeys(keyFile, pubFile string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(keyFile, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(pubFile, "PUBLIC KEY", pub, 0o644)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readPEM(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New(path + ": no PEM block")
	}
	return block.Bytes, nil
}

func readCert(path string) (*x509.Certificate, error) {
	der, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func readECKey(path string) (*ecdsa.PrivateKey, error) {
	der, err := readPEM(path)
	if err != nil {
		return nil, err
	}
	return x509.ParseECPrivateKey(der)
}
