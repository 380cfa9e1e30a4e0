package certsigner

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

func csr(name, signer, version string, conds ...certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequest {
	secs := int32(7200)
	c := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: version},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           []byte("-----BEGIN CERTIFICATE REQUEST-----\n..."),
			SignerName:        signer,
			ExpirationSeconds: &secs,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth},
			Username:          "system:serviceaccount:ferry-system:ferry-node",
			Extra:             map[string]certificatesv1.ExtraValue{identity.NodeNameExtra: {"node-a"}},
		},
	}
	for _, t := range conds {
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue})
	}
	return c
}

func start(t *testing.T, objs ...runtime.Object) (*Requests, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := Start(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	return r, client
}

func TestOnlyFerrysRequestsAreListedAsTheSignerReadsThem(t *testing.T) {
	notOurs := csr("kubelet", "kubernetes.io/kubelet-serving", "3")
	issued := csr("issued", identity.Signer, "4", certificatesv1.CertificateApproved)
	issued.Status.Certificate = []byte("-----BEGIN CERTIFICATE-----\n...")
	notTrue := csr("approval-unknown", identity.Signer, "5", certificatesv1.CertificateApproved)
	notTrue.Status.Conditions[0].Status = corev1.ConditionUnknown
	r, _ := start(t, csr("pending", identity.Signer, "2"), notOurs, issued, notTrue,
		csr("denied", identity.Signer, "6", certificatesv1.CertificateDenied),
		csr("failed", identity.Signer, "7", certificatesv1.CertificateApproved, certificatesv1.CertificateFailed))
	list, err := r.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ports.SigningRequest{}
	for _, p := range list {
		got[p.Name] = p
	}
	if _, ok := got["kubelet"]; ok || len(got) != 5 {
		t.Fatalf("listed %v, want Ferry's 5 requests only", slices.Sorted(maps.Keys(got)))
	}
	p := got["pending"]
	if p.Version != "2" || string(p.CSR) != string(csr("", "", "").Spec.Request) || p.Username != "system:serviceaccount:ferry-system:ferry-node" ||
		!slices.Equal(p.Extra[identity.NodeNameExtra], []string{"node-a"}) || !slices.Equal(p.Usages, []string{"digital signature", "server auth", "client auth"}) ||
		p.Expiration != 2*time.Hour || p.Approved || p.Denied || p.Failed || p.Issued {
		t.Errorf("pending read as %+v", p)
	}
	for name, want := range map[string]ports.SigningRequest{
		"issued":           {Approved: true, Issued: true},
		"approval-unknown": {},
		"denied":           {Denied: true},
		"failed":           {Approved: true, Failed: true},
	} {
		p := got[name]
		if p.Approved != want.Approved || p.Denied != want.Denied || p.Failed != want.Failed || p.Issued != want.Issued {
			t.Errorf("%s read as approved %v denied %v failed %v issued %v", name, p.Approved, p.Denied, p.Failed, p.Issued)
		}
	}
}

func TestANewRequestIsNotified(t *testing.T) {
	r, client := start(t)
	select {
	case <-r.Changes():
	default:
	}
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr("new", identity.Signer, "2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Changes():
	case <-time.After(5 * time.Second):
		t.Fatal("no change notified for a new request")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, _ := r.List(context.Background())
		if len(list) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new request is not listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// subresourceWrites are the updates made, as "subresource name".
func subresourceWrites(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok {
			out = append(out, u.GetSubresource()+" "+u.GetObject().(*certificatesv1.CertificateSigningRequest).Name)
		}
	}
	return out
}

func condition(t *testing.T, client *fake.Clientset, name string, typ certificatesv1.RequestConditionType) certificatesv1.CertificateSigningRequestCondition {
	t.Helper()
	c, err := client.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond
		}
	}
	t.Fatalf("%s has no condition %s: %+v", name, typ, c.Status.Conditions)
	return certificatesv1.CertificateSigningRequestCondition{}
}

func TestAnswersGoThroughTheirSubresources(t *testing.T) {
	r, client := start(t, csr("a", identity.Signer, "2"), csr("d", identity.Signer, "3"), csr("f", identity.Signer, "4", certificatesv1.CertificateApproved))
	ctx := context.Background()
	read := func(name string) ports.SigningRequest {
		c, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return toPort(c)
	}
	approved, err := r.Approve(ctx, read("a"), "the node daemon of node-a asked for its own name")
	if err != nil {
		t.Fatal(err)
	}
	if !approved.Approved || approved.Name != "a" {
		t.Errorf("Approve returned %+v", approved)
	}
	if err := r.Issue(ctx, approved, []byte("CERT")); err != nil {
		t.Fatal(err)
	}
	if err := r.Deny(ctx, read("d"), "common name \"node-b\" is not the requester's node \"node-a\""); err != nil {
		t.Fatal(err)
	}
	if err := r.Fail(ctx, read("f"), "approved, but not signed"); err != nil {
		t.Fatal(err)
	}
	if got, want := subresourceWrites(client), []string{"approval a", "status a", "approval d", "status f"}; !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
	for name, want := range map[string]certificatesv1.RequestConditionType{"a": certificatesv1.CertificateApproved, "d": certificatesv1.CertificateDenied, "f": certificatesv1.CertificateFailed} {
		c := condition(t, client, name, want)
		if c.Status != corev1.ConditionTrue || c.Reason != Reason || c.Message == "" || c.LastUpdateTime.IsZero() {
			t.Errorf("%s: condition %+v", name, c)
		}
	}
	if a := read("a"); !a.Issued {
		t.Error("a's certificate not written")
	}
}

// A request changed since it was read, gone, or lost to a concurrent
// writer is ErrConflict: the signer judges it again.
func TestAWriteToARequestChangedMeanwhileIsAConflict(t *testing.T) {
	r, client := start(t, csr("a", identity.Signer, "2"), csr("b", identity.Signer, "2"))
	ctx := context.Background()
	stale := ports.SigningRequest{Name: "a", Version: "1"}
	if _, err := r.Approve(ctx, stale, "x"); !errors.Is(err, ports.ErrConflict) {
		t.Errorf("Approve of a stale request: %v, want ErrConflict", err)
	}
	if err := r.Deny(ctx, ports.SigningRequest{Name: "gone", Version: "2"}, "x"); !errors.Is(err, ports.ErrConflict) {
		t.Errorf("Deny of a request gone: %v, want ErrConflict", err)
	}
	client.PrependReactor("update", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}, "b", errors.New("the object has been modified"))
	})
	current := ports.SigningRequest{Name: "b", Version: "2"}
	if err := r.Issue(ctx, current, []byte("CERT")); !errors.Is(err, ports.ErrConflict) {
		t.Errorf("Issue that lost to another writer: %v, want ErrConflict", err)
	}
	if err := r.Fail(ctx, current, "x"); !errors.Is(err, ports.ErrConflict) {
		t.Errorf("Fail that lost to another writer: %v, want ErrConflict", err)
	}
	if w := subresourceWrites(client); len(w) != 2 {
		t.Errorf("writes %q, want only the two refused", w)
	}
}

// A request of another signer is never written, even when named.
func TestARequestOfAnotherSignerIsNeverWritten(t *testing.T) {
	r, client := start(t, csr("kubelet", "kubernetes.io/kubelet-serving", "2"))
	err := r.Deny(context.Background(), ports.SigningRequest{Name: "kubelet", Version: "2"}, "x")
	if !errors.Is(err, ports.ErrConflict) {
		t.Errorf("Deny of another signer's request: %v, want ErrConflict", err)
	}
	if w := subresourceWrites(client); len(w) != 0 {
		t.Errorf("wrote %q", w)
	}
}
