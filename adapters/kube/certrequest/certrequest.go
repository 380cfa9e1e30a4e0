// Package certrequest obtains a node's peer certificate through the
// Kubernetes certificates API (ports.CertificateEnrollment): a
// certificates.k8s.io/v1 CertificateSigningRequest to Ferry's signer
// (identity.Signer), made with the node daemon's service account, whose
// token names its node (the API server records that in the request, and
// the signer grants only a certificate naming that node).
//
// Each request has a key of its own, made here and never reused: a P-256
// ECDSA key, and a request naming the node as its common name and its one
// URI (identity.URI), identity.ServerName beside. The request is followed
// by a watch on that one object, read again every PollInterval whatever
// the watch says (a watch the API server refuses or ends is no hang), until
// the signer issues the certificate, denies the request, or fails it, or
// Timeout passes.
//
// Requests are never deleted here: the node daemon may not delete
// certificate signing requests (RBAC cannot narrow a delete to its own,
// so every request of the cluster, kubelets' too, would be in its reach).
// Kubernetes' own cleaner (the csrcleaner of kube-controller-manager,
// looking hourly) removes them: one issued, denied or failed an hour
// after its answer (the condition's lastUpdateTime, which Ferry's signer
// sets), one left unanswered or unissued a day after. A request given up
// holds no secret: its key goes with the Enroll call that made it, so a
// certificate the signer issues to it later is of use to no one.
//
// The adapter decides nothing: whether the certificate is good to use,
// and when to ask again, is the caller's (app/identity).
package certrequest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net/url"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// Labels on every request, to find a node's.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	// LabelNode is the node the request is for (NodeLabel: its name, or a
	// hash of a name too long for a label).
	LabelNode = "ferry.zfs.csi.io/node"

	nameValue      = "ferry"
	componentValue = "peer-identity"
	namePrefix     = "ferry-peer-"
)

// MinLifetime is the shortest lifetime the certificates API takes
// (spec.expirationSeconds, at least 600).
const MinLifetime = 10 * time.Minute

// Options are how long a Requester waits; fields left zero take the
// defaults.
type Options struct {
	// Timeout bounds the wait for the signer's answer to one request
	// (default 5 minutes): the request is given up then (its key dropped,
	// the request left to the API server's cleaner), and a later Enroll
	// asks anew.
	Timeout time.Duration
	// PollInterval is how often the request is read again, whatever its
	// watch says (default 10 seconds).
	PollInterval time.Duration
}

// Requester asks the certificates API for node certificates.
type Requester struct {
	client kubernetes.Interface
	log    *zap.Logger
	opts   Options
}

var _ ports.CertificateEnrollment = (*Requester)(nil)

// New returns a Requester on client.
func New(client kubernetes.Interface, log *zap.Logger, opts Options) *Requester {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	return &Requester{client: client, log: log, opts: opts}
}

// RequestName is the name of a request of node's: "ferry-peer-<node>-
// <suffix>", or a hash of the node name in its place when that would be
// too long for an object name.
func RequestName(node, suffix string) string {
	n := namePrefix + node + "-" + suffix
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	return namePrefix + nodeHash(node) + "-" + suffix
}

// NodeLabel is the value of LabelNode for node: its name, or a hash of
// it when the name is too long for a label value.
func NodeLabel(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	return nodeHash(node)
}

func nodeHash(node string) string {
	sum := sha256.Sum256([]byte(node))
	return hex.EncodeToString(sum[:16])
}

// Enroll implements ports.CertificateEnrollment.
func (r *Requester) Enroll(ctx context.Context, node string, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	if !identity.ValidNode(node) {
		return nil, nil, fmt.Errorf("ask for a peer certificate: %q is no node name: %w", node, ports.ErrInvalid)
	}
	if lifetime < MinLifetime {
		return nil, nil, fmt.Errorf("ask for a peer certificate for %s: a lifetime of %s is shorter than the certificates API's minimum, %s: %w", node, lifetime, MinLifetime, ports.ErrInvalid)
	}
	secs := int32(min(lifetime/time.Second, math.MaxInt32))
	key, csrPEM, err := newRequest(node)
	if err != nil {
		return nil, nil, fmt.Errorf("ask for a peer certificate for %s: %w", node, err)
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, nil, fmt.Errorf("ask for a peer certificate for %s: %w", node, err)
	}
	usages := make([]certv1.KeyUsage, len(identity.Usages))
	for i, u := range identity.Usages {
		usages[i] = certv1.KeyUsage(u)
	}
	req := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:   RequestName(node, hex.EncodeToString(suffix)),
			Labels: map[string]string{LabelName: nameValue, LabelComponent: componentValue, LabelNode: NodeLabel(node)},
		},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           csrPEM,
			SignerName:        identity.Signer,
			ExpirationSeconds: &secs,
			Usages:            usages,
		},
	}
	created, err := r.client.CertificatesV1().CertificateSigningRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("ask for a peer certificate for %s: create certificate signing request %s: %w", node, req.Name, err)
	}
	r.log.Info("asked for a peer certificate", zap.String("node", node), zap.String("request", created.Name), zap.String("signer", identity.Signer), zap.Duration("lifetime", lifetime))
	// The request stays once answered or given up: the API server's
	// cleaner removes it (see the package documentation).

	issued, err := r.wait(ctx, created)
	if err != nil {
		return nil, nil, err
	}
	certPEM = issued.Status.Certificate
	if err := matches(certPEM, key); err != nil {
		return nil, nil, fmt.Errorf("the certificate issued to request %s: %w", created.Name, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the key of request %s: %w", created.Name, err)
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// newRequest makes a fresh key and a certificate request naming node,
// signed with it, as PEM.
func newRequest(node string) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate a key: %w", err)
	}
	uri, err := url.Parse(identity.URI(node))
	if err != nil {
		return nil, nil, fmt.Errorf("the URI of node %s: %w", node, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: node},
		DNSNames: []string{identity.ServerName},
		URIs:     []*url.URL{uri},
	}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create a certificate request: %w", err)
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// matches checks that certPEM's first certificate is key's.
func matches(certPEM []byte, key *ecdsa.PrivateKey) error {
	rest := certPEM
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return errors.New("holds no PEM certificate")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		leaf, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("unreadable: %w", err)
		}
		if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
			return errors.New("is not for the key of the request")
		}
		return nil
	}
}

// wait follows the request until the signer answers it, or Timeout or
// ctx ends; it returns the request issued, or why there is no
// certificate.
func (r *Requester) wait(parent context.Context, req *certv1.CertificateSigningRequest) (*certv1.CertificateSigningRequest, error) {
	ctx, cancel := context.WithTimeout(parent, r.opts.Timeout)
	defer cancel()
	csrs := r.client.CertificatesV1().CertificateSigningRequests()
	cur := req
	var readErr error
	for {
		if done, err := answered(cur); done {
			return cur, err
		}
		seen, gone := r.follow(ctx, cur)
		if gone {
			return nil, fmt.Errorf("certificate signing request %s was deleted before the signer answered it", req.Name)
		}
		if seen != nil {
			cur = seen
			continue
		}
		if err := parent.Err(); err != nil {
			return nil, fmt.Errorf("wait for certificate signing request %s: %w", req.Name, err)
		}
		if ctx.Err() != nil {
			why := pending(cur)
			if readErr != nil {
				why = fmt.Sprintf("%s; last read: %v", why, readErr)
			}
			return nil, fmt.Errorf("certificate signing request %s not answered within %s (%s): is Ferry's signer (%s, in the controller) running?", req.Name, r.opts.Timeout, why, identity.Signer)
		}
		got, err := csrs.Get(ctx, req.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("certificate signing request %s was deleted before the signer answered it", req.Name)
		case err != nil:
			readErr = err
		case got.UID != req.UID:
			return nil, fmt.Errorf("certificate signing request %s was deleted and made again by someone else before the signer answered it", req.Name)
		default:
			cur, readErr = got, nil
		}
	}
}

// follow watches the request from cur's version for PollInterval at
// most, and returns the request as last seen when an event changed it,
// or gone when it was deleted; nothing when the interval passed, the
// watch ended or could not start (after waiting out the interval: the
// caller reads the object again).
func (r *Requester) follow(ctx context.Context, cur *certv1.CertificateSigningRequest) (seen *certv1.CertificateSigningRequest, gone bool) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.PollInterval)
	defer cancel()
	w, err := r.client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", cur.Name).String(),
		ResourceVersion: cur.ResourceVersion,
	})
	if err != nil {
		<-ctx.Done()
		return nil, false
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return seen, false
		case ev, ok := <-w.ResultChan():
			if !ok {
				<-ctx.Done()
				return seen, false
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR || csr.Name != cur.Name || csr.UID != cur.UID {
				if ev.Type == watch.Error {
					<-ctx.Done()
					return seen, false
				}
				continue
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, true
			case watch.Added, watch.Modified:
				seen = csr
				if done, _ := answered(csr); done {
					return csr, false
				}
			}
		}
	}
}

// answered says whether the signer answered csr: issued it (nil), or
// denied or failed it (why).
func answered(csr *certv1.CertificateSigningRequest) (bool, error) {
	for _, c := range csr.Status.Conditions {
		if c.Status == corev1.ConditionFalse {
			continue
		}
		switch c.Type {
		case certv1.CertificateDenied:
			return true, fmt.Errorf("certificate signing request %s was denied (%s): %s", csr.Name, c.Reason, c.Message)
		case certv1.CertificateFailed:
			return true, fmt.Errorf("certificate signing request %s failed (%s): %s", csr.Name, c.Reason, c.Message)
		}
	}
	return len(csr.Status.Certificate) > 0, nil
}

// pending says what csr waits for.
func pending(csr *certv1.CertificateSigningRequest) string {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateApproved && c.Status != corev1.ConditionFalse {
			return "approved, not signed yet"
		}
	}
	return "not approved yet"
}
