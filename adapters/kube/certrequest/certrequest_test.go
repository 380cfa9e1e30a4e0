package certrequest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// newClient is a fake API server that gives each object created a UID and
// a creation time, one second after the last, as the real one does.
func newClient(objects ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objects...)
	var n atomic.Int64
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		csr := a.(k8stesting.CreateAction).GetObject().(*certv1.CertificateSigningRequest)
		i := n.Add(1)
		csr.UID = types.UID(fmt.Sprintf("uid-%d", i))
		csr.Spec.Username = "system:serviceaccount:ferry:ferry-node"
		if csr.CreationTimestamp.IsZero() {
			csr.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * time.Second))
		}
		return false, nil, nil
	})
	return c
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test peer CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

// issue signs the request in csr as asked (pub replaces its key when set).
func (ca *testCA) issue(t *testing.T, csr *certv1.CertificateSigningRequest, pub any) []byte {
	t.Helper()
	b, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Error(err)
		return nil
	}
	if pub == nil {
		pub = req.PublicKey
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: req.Subject, DNSNames: req.DNSNames, URIs: req.URIs,
		NotBefore: time.Now().Add(-5 * time.Minute), NotAfter: time.Now().Add(time.Duration(*csr.Spec.ExpirationSeconds) * time.Second),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Error(err)
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// signer plays Ferry's signer on the fake API server: it answers each
// request of identity.Signer still unanswered with answer (which sets its
// status), until the test ends. It keeps the requests it saw.
type signer struct {
	mu   sync.Mutex
	seen []*certv1.CertificateSigningRequest
}

func playSigner(t *testing.T, client *fake.Clientset, answer func(*certv1.CertificateSigningRequest)) *signer {
	s := &signer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		answered := map[types.UID]bool{}
		for ctx.Err() == nil {
			list, err := client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					csr := &list.Items[i]
					if answered[csr.UID] || csr.Spec.SignerName != identity.Signer || strings.HasPrefix(string(csr.UID), "old") {
						continue
					}
					answered[csr.UID] = true
					s.mu.Lock()
					s.seen = append(s.seen, csr.DeepCopy())
					s.mu.Unlock()
					if answer == nil {
						continue
					}
					answer(csr)
					if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
						t.Errorf("the test signer's update: %v", err)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *signer) requests() []*certv1.CertificateSigningRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

func approve(csr *certv1.CertificateSigningRequest) {
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "FerryPeer"})
}

func issuing(t *testing.T, ca *testCA) func(*certv1.CertificateSigningRequest) {
	return func(csr *certv1.CertificateSigningRequest) {
		approve(csr)
		csr.Status.Certificate = ca.issue(t, csr, nil)
	}
}

// noDeletes fails the test when the Requester deleted anything: the node
// daemon may not (deploy/rbac-node.yaml), the API server's cleaner
// removes the requests.
func noDeletes(t *testing.T, client *fake.Clientset) {
	t.Helper()
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v == "delete" || v == "delete-collection" {
			t.Errorf("the requester called %s on %s: the node daemon may not delete certificate signing requests", v, a.GetResource().Resource)
		}
	}
}

func remaining(t *testing.T, client *fake.Clientset) []string {
	t.Helper()
	list, err := client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list.Items {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

// quick are options for tests that do not wait long.
var quick = Options{Timeout: 5 * time.Second, PollInterval: 20 * time.Millisecond}

func TestAnIssuedCertificateIsReturnedWithItsKeyAndTheRequestLeft(t *testing.T) {
	client := newClient()
	ca := newTestCA(t)
	s := playSigner(t, client, issuing(t, ca))
	// A long poll interval: the answer comes through the watch.
	r := New(client, zap.NewNop(), Options{Timeout: 5 * time.Second, PollInterval: time.Hour})
	start := time.Now()
	certPEM, keyPEM, err := r.Enroll(context.Background(), "node-a", 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the answer took %s: not seen through the watch", d)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("the certificate and key returned are no pair: %v", err)
	}
	if k, ok := pair.PrivateKey.(*ecdsa.PrivateKey); !ok || k.Curve != elliptic.P256() {
		t.Fatalf("the key is %T, want ECDSA P-256", pair.PrivateKey)
	}
	if b, _ := pem.Decode(keyPEM); b == nil || b.Type != "PRIVATE KEY" {
		t.Fatalf("the key is not PKCS#8 PEM: %q", keyPEM)
	}

	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("the signer saw %d requests, want 1", len(reqs))
	}
	csr := reqs[0]
	if !strings.HasPrefix(csr.Name, "ferry-peer-node-a-") || len(validation.IsDNS1123Subdomain(csr.Name)) != 0 {
		t.Errorf("request name %q", csr.Name)
	}
	if csr.Spec.SignerName != identity.Signer {
		t.Errorf("signer %q", csr.Spec.SignerName)
	}
	if csr.Spec.ExpirationSeconds == nil || *csr.Spec.ExpirationSeconds != 30*24*3600 {
		t.Errorf("expirationSeconds %v", csr.Spec.ExpirationSeconds)
	}
	var usages []string
	for _, u := range csr.Spec.Usages {
		usages = append(usages, string(u))
	}
	if !slices.Equal(usages, identity.Usages) {
		t.Errorf("usages %q, want %q", usages, identity.Usages)
	}
	want := map[string]string{LabelName: "ferry", LabelComponent: "peer-identity", LabelNode: "node-a"}
	for k, v := range want {
		if csr.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, csr.Labels[k], v)
		}
	}
	b, _ := pem.Decode(csr.Spec.Request)
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.CheckSignature(); err != nil {
		t.Errorf("the request's signature: %v", err)
	}
	if req.Subject.CommonName != "node-a" || len(req.Subject.Organization) != 0 || !slices.Equal(req.DNSNames, []string{identity.ServerName}) ||
		len(req.URIs) != 1 || req.URIs[0].String() != identity.URI("node-a") || len(req.IPAddresses) != 0 || len(req.EmailAddresses) != 0 {
		t.Errorf("the request says CN %q, O %q, DNS %q, URIs %v, IPs %v, e-mails %q", req.Subject.CommonName, req.Subject.Organization, req.DNSNames, req.URIs, req.IPAddresses, req.EmailAddresses)
	}
	if !req.PublicKey.(*ecdsa.PublicKey).Equal(pair.PrivateKey.(*ecdsa.PrivateKey).Public()) {
		t.Error("the request is not for the key returned")
	}
	// The request stays for the API server's cleaner.
	if left := remaining(t, client); len(left) != 1 || left[0] != csr.Name {
		t.Errorf("requests left: %q, want %s", left, csr.Name)
	}
	noDeletes(t, client)
}

func TestEveryRequestHasAKeyOfItsOwn(t *testing.T) {
	client := newClient()
	playSigner(t, client, issuing(t, newTestCA(t)))
	r := New(client, zap.NewNop(), quick)
	_, k1, err := r.Enroll(context.Background(), "node-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, k2, err := r.Enroll(context.Background(), "node-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if string(k1) == string(k2) {
		t.Fatal("two requests with the same key")
	}
}

func TestADeniedRequestIsAnErrorWithTheSignersMessage(t *testing.T) {
	for _, cond := range []certv1.RequestConditionType{certv1.CertificateDenied, certv1.CertificateFailed} {
		t.Run(string(cond), func(t *testing.T) {
			client := newClient()
			playSigner(t, client, func(csr *certv1.CertificateSigningRequest) {
				csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: cond, Status: corev1.ConditionTrue,
					Reason: "FerryPeerRefused", Message: "the requester's token names no node"})
			})
			_, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour)
			if err == nil || !strings.Contains(err.Error(), "the requester's token names no node") || !strings.Contains(err.Error(), "FerryPeerRefused") {
				t.Fatalf("Enroll = %v, want the signer's message", err)
			}
			noDeletes(t, client)
		})
	}
}

func TestARequestNotAnsweredInTimeIsGivenUp(t *testing.T) {
	client := newClient()
	playSigner(t, client, approve) // approved, never signed
	r := New(client, zap.NewNop(), Options{Timeout: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	_, _, err := r.Enroll(context.Background(), "node-a", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "not answered within") || !strings.Contains(err.Error(), "approved, not signed yet") {
		t.Fatalf("Enroll = %v", err)
	}
	noDeletes(t, client)
}

func TestTheCallersContextEndsTheWait(t *testing.T) {
	client := newClient()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err := New(client, zap.NewNop(), quick).Enroll(ctx, "node-a", time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Enroll = %v, want the context's end", err)
	}
	noDeletes(t, client)
}

func TestWithoutAWatchTheRequestIsPolled(t *testing.T) {
	client := newClient()
	client.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, errors.New("watch refused")
	})
	playSigner(t, client, issuing(t, newTestCA(t)))
	certPEM, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour)
	if err != nil || len(certPEM) == 0 {
		t.Fatalf("Enroll = %v", err)
	}
}

func TestAWatchThatEndsAtOnceFallsBackToPolling(t *testing.T) {
	client := newClient()
	client.PrependWatchReactor("certificatesigningrequests", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		go w.Stop()
		return true, w, nil
	})
	playSigner(t, client, issuing(t, newTestCA(t)))
	if _, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour); err != nil {
		t.Fatalf("Enroll = %v", err)
	}
}

func TestACertificateForAnotherKeyIsRefused(t *testing.T) {
	client := newClient()
	ca := newTestCA(t)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	playSigner(t, client, func(csr *certv1.CertificateSigningRequest) {
		approve(csr)
		csr.Status.Certificate = ca.issue(t, csr, &other.PublicKey)
	})
	_, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "not for the key of the request") {
		t.Fatalf("Enroll = %v", err)
	}
}

func TestARequestDeletedWhileWaitingIsAnError(t *testing.T) {
	client := newClient()
	playSigner(t, client, nil)
	go func() {
		for {
			list, _ := client.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
			if list != nil && len(list.Items) > 0 {
				client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), list.Items[0].Name, metav1.DeleteOptions{})
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour)
	if err == nil || !strings.Contains(err.Error(), "deleted before the signer answered") {
		t.Fatalf("Enroll = %v", err)
	}
}

// old is a request of node's left over by an earlier attempt.
func old(name, node, user string, created time.Time) *certv1.CertificateSigningRequest {
	_, req, _ := newRequest(node)
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("old-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{LabelName: "ferry", LabelComponent: "peer-identity", LabelNode: NodeLabel(node)}},
		Spec: certv1.CertificateSigningRequestSpec{Request: req, SignerName: identity.Signer, Username: user},
	}
}

func TestNoRequestIsDeletedNeitherItsNorEarlierOnes(t *testing.T) {
	daemon := "system:serviceaccount:ferry:ferry-node"
	past := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	client := newClient(
		old("ferry-peer-node-a-old1", "node-a", daemon, past),
		old("ferry-peer-node-b-old", "node-b", daemon, past),
	)
	// Deleting is forbidden to the node daemon; were it tried, it is
	// refused, as the API server would.
	client.PrependReactor("delete", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(certv1.Resource("certificatesigningrequests"), a.(k8stesting.DeleteAction).GetName(), errors.New("no delete verb"))
	})
	s := playSigner(t, client, issuing(t, newTestCA(t)))
	if _, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), "node-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	want := []string{"ferry-peer-node-a-old1", "ferry-peer-node-b-old", s.requests()[0].Name}
	slices.Sort(want)
	if left := remaining(t, client); !slices.Equal(left, want) {
		t.Fatalf("requests left %q, want %q", left, want)
	}
	noDeletes(t, client)
}

func TestALongNodeNameGivesValidNamesAndLabels(t *testing.T) {
	node := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if !identity.ValidNode(node) || len(node) != 253 {
		t.Fatalf("the test's node name is not a valid 253-character one (%d)", len(node))
	}
	client := newClient()
	s := playSigner(t, client, issuing(t, newTestCA(t)))
	if _, _, err := New(client, zap.NewNop(), quick).Enroll(context.Background(), node, time.Hour); err != nil {
		t.Fatal(err)
	}
	csr := s.requests()[0]
	if errs := validation.IsDNS1123Subdomain(csr.Name); len(errs) != 0 {
		t.Errorf("request name %q: %v", csr.Name, errs)
	}
	if errs := validation.IsValidLabelValue(csr.Labels[LabelNode]); len(errs) != 0 {
		t.Errorf("node label %q: %v", csr.Labels[LabelNode], errs)
	}
	if RequestName(node, "x") == RequestName(node+"x", "x") || NodeLabel(node) == NodeLabel(node[:252]+"e") {
		t.Error("two long node names share a request name or a label")
	}
}

func TestBadArgumentsAskNothing(t *testing.T) {
	client := newClient()
	r := New(client, zap.NewNop(), quick)
	for _, c := range []struct {
		node     string
		lifetime time.Duration
	}{{"node-a", 5 * time.Minute}, {"Node_A", time.Hour}, {"", time.Hour}} {
		if _, _, err := r.Enroll(context.Background(), c.node, c.lifetime); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Enroll(%q, %s) = %v, want ErrInvalid", c.node, c.lifetime, err)
		}
	}
	if len(client.Actions()) != 0 {
		t.Errorf("the API server was called: %v", client.Actions())
	}
}
