//go:build apiserver

package kubeapi_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ferry-csi/ferry/adapters/kube/certsigner"
	"github.com/ferry-csi/ferry/adapters/peerca"
	appidentity "github.com/ferry-csi/ferry/app/identity"
	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/tests/kubeapi"
)

// Ferry's peer signer on a real API server that authorizes by RBAC, with
// the roles of deploy/ (the signer's and the node daemon's), as the
// signer's ServiceAccount: a node daemon's request for its own name is
// approved and issued within about a second; one naming another node,
// or from another account, is denied; one an administrator approved by
// hand that names another node is marked failed and never issued; a
// request to another signer is not touched. The node daemon may make and
// read requests, never approve nor delete them.
func TestFerrysSignerIssuesANodeItsOwnCertificateOnly(t *testing.T) {
	srv := kubeapi.StartWith(t, kubeapi.Options{RBAC: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ferry-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	signerAccount := signerApplyDeployRBAC(t, admin)
	t.Logf("the signer runs as %s", signerAccount)

	// Another namespace's ferry-node, with the node role: an account of
	// the same name is not Ferry's.
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere-ferry-node"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "ferry-node", Namespace: "elsewhere"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ferry-node"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	as := func(user, node string) kubernetes.Interface {
		c := rest.CopyConfig(srv.Config)
		c.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: map[string][]string{identity.NodeNameExtra: {node}}}
		return kubernetes.NewForConfigOrDie(c)
	}
	nodeA := as(appidentity.NodeAccount("ferry-system"), "node-a")
	elsewhere := as("system:serviceaccount:elsewhere:ferry-node", "node-a")
	request := func(c kubernetes.Interface, name, signer, cn string) {
		t.Helper()
		if _, err := c.CertificatesV1().CertificateSigningRequests().Create(ctx, signerCSR(t, name, signer, cn), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create request %s: %v", name, err)
		}
	}
	get := func(name string) *certificatesv1.CertificateSigningRequest {
		t.Helper()
		c, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Before the signer runs: a request naming node-b that an
	// administrator approves by hand, one the node tries to approve
	// itself, and one to another signer.
	request(nodeA, "hand-approved-node-b", identity.Signer, "node-b")
	hand := get("hand-approved-node-b")
	hand.Status.Conditions = append(hand.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove", Message: "an administrator"})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, hand.Name, hand, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	request(nodeA, "self-approved", identity.Signer, "node-a")
	self := get("self-approved")
	self.Status.Conditions = append(self.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Self", Message: "the node itself"})
	if _, err := nodeA.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, self.Name, self, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node daemon approving its own request: %v, want Forbidden", err)
	}
	request(nodeA, "another-signer", "example.com/other", "node-a")

	// The CA, as the mounted Secret ferry-peer-ca holds it.
	ca, certFile, keyFile := signerWriteCA(t)
	signerCfg := rest.CopyConfig(srv.Config)
	signerCfg.Impersonate = rest.ImpersonationConfig{UserName: signerAccount}
	reqs, err := certsigner.Start(ctx, kubernetes.NewForConfigOrDie(signerCfg))
	if err != nil {
		t.Fatalf("the signer's watch (as %s): %v", signerAccount, err)
	}
	signer := appidentity.NewSigner(appidentity.SignerConfig{Namespace: "ferry-system"}, reqs, peerca.New(certFile, keyFile), zaptest.NewLogger(t))
	done := make(chan struct{})
	go func() { defer close(done); signer.Run(ctx) }()
	defer func() { cancel(); <-done }()

	condition := func(c *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) (certificatesv1.CertificateSigningRequestCondition, bool) {
		for _, cond := range c.Status.Conditions {
			if cond.Type == typ && cond.Status == corev1.ConditionTrue {
				return cond, true
			}
		}
		return certificatesv1.CertificateSigningRequestCondition{}, false
	}
	issued := func(name string) *x509.Certificate {
		t.Helper()
		var c *certificatesv1.CertificateSigningRequest
		waitUntil(t, name+" issued", 30*time.Second, func() (bool, string) {
			c = get(name)
			return len(c.Status.Certificate) > 0, fmt.Sprintf("conditions %+v", c.Status.Conditions)
		})
		if _, ok := condition(c, certificatesv1.CertificateApproved); !ok {
			t.Errorf("%s issued but not approved: %+v", name, c.Status.Conditions)
		}
		block, _ := pem.Decode(c.Status.Certificate)
		if block == nil {
			t.Fatalf("%s: no PEM certificate: %q", name, c.Status.Certificate)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}

	start := time.Now()
	request(nodeA, "own", identity.Signer, "node-a")
	cert := issued("own")
	t.Logf("a new request was issued %s after it was made", time.Since(start).Round(time.Millisecond))
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a new request issued after %s, want about a second", took)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}, DNSName: identity.ServerName}); err != nil {
			t.Errorf("the certificate does not verify against the CA for %v: %v", u, err)
		}
	}
	uris := make([]string, len(cert.URIs))
	for i, u := range cert.URIs {
		uris[i] = u.String()
	}
	if node, ok := identity.NodeOf(uris); !ok || node != "node-a" || cert.Subject.CommonName != "node-a" {
		t.Errorf("the certificate names %q (%v), CN %q: want node-a", node, uris, cert.Subject.CommonName)
	}
	// Asked for 2 h (expirationSeconds), valid from 5 min before.
	if d := cert.NotAfter.Sub(cert.NotBefore); d < 2*time.Hour+peerca.Backdate-time.Minute || d > 2*time.Hour+peerca.Backdate+time.Minute {
		t.Errorf("valid for %s, want the 2h asked and %s before", d, peerca.Backdate)
	}
	issued("self-approved")

	denied := func(name, says string) {
		t.Helper()
		var c *certificatesv1.CertificateSigningRequest
		waitUntil(t, name+" denied", 30*time.Second, func() (bool, string) {
			c = get(name)
			_, ok := condition(c, certificatesv1.CertificateDenied)
			return ok, fmt.Sprintf("conditions %+v", c.Status.Conditions)
		})
		cond, _ := condition(c, certificatesv1.CertificateDenied)
		if !strings.Contains(cond.Message, says) || cond.Reason != certsigner.Reason {
			t.Errorf("%s denied with %s %q, want %s and a message saying %q", name, cond.Reason, cond.Message, certsigner.Reason, says)
		}
	}
	request(nodeA, "names-node-b", identity.Signer, "node-b")
	denied("names-node-b", `common name "node-b" is not the requester's node "node-a"`)
	request(elsewhere, "another-account", identity.Signer, "node-a")
	denied("another-account", "not by Ferry's node daemon")

	waitUntil(t, "the hand-approved request naming node-b failed", 30*time.Second, func() (bool, string) {
		c := get("hand-approved-node-b")
		_, ok := condition(c, certificatesv1.CertificateFailed)
		return ok, fmt.Sprintf("conditions %+v", c.Status.Conditions)
	})
	// A pass of the signer after all the above (it answered a request
	// made later): still nothing issued that Decide refuses, nothing to
	// another signer.
	request(nodeA, "own-later", identity.Signer, "node-a")
	issued("own-later")
	for _, name := range []string{"hand-approved-node-b", "names-node-b", "another-account"} {
		if c := get(name); len(c.Status.Certificate) > 0 {
			t.Errorf("%s was issued a certificate", name)
		}
	}
	if c := get("hand-approved-node-b"); !strings.Contains(signerConditionMessage(c, certificatesv1.CertificateFailed), `common name "node-b"`) {
		t.Errorf("hand-approved-node-b failed with %q, want Decide's reason", signerConditionMessage(c, certificatesv1.CertificateFailed))
	}
	if c := get("another-signer"); len(c.Status.Conditions) != 0 || len(c.Status.Certificate) != 0 {
		t.Errorf("a request to another signer was answered: %+v", c.Status)
	}

	// The node daemon reads its requests back, and may delete none, not
	// even its own (kube-controller-manager's CSR cleaner removes them).
	list, err := nodeA.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + identity.Signer})
	if err != nil {
		t.Fatalf("the node daemon lists the requests: %v", err)
	}
	if !slices.ContainsFunc(list.Items, func(c certificatesv1.CertificateSigningRequest) bool {
		return c.Name == "own" && len(c.Status.Certificate) > 0
	}) {
		t.Errorf("the node daemon's list lacks its issued request")
	}
	if err := nodeA.CertificatesV1().CertificateSigningRequests().Delete(ctx, "own", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node daemon deletes its request: %v, want Forbidden", err)
	}
}

func signerConditionMessage(c *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) string {
	for _, cond := range c.Status.Conditions {
		if cond.Type == typ {
			return cond.Message
		}
	}
	return ""
}

// signerCSR is a request for a node's peer certificate naming node cn, as
// a node daemon makes it, for 2 h.
func signerCSR(t *testing.T, name, signer, cn string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(identity.URI(cn))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cn}, DNSNames: []string{identity.ServerName}, URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	secs := int32(7200)
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName:        signer,
			ExpirationSeconds: &secs,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth, certificatesv1.UsageClientAuth},
		},
	}
}

// signerWriteCA writes a throw-away peer CA as tls.crt and tls.key.
func signerWriteCA(t *testing.T) (ca *x509.Certificate, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ferry peer CA (test)"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(der)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca, certFile, keyFile
}

// signerApplyDeployRBAC creates the ServiceAccounts and roles of every
// file deploy/kustomization.yaml lists (in ferry-system where a namespaced
// object names none, as kustomize would), and returns the user name of
// the ServiceAccount bound to the ClusterRole that may sign for Ferry's
// signer: the signer's, as the manifests deploy it.
func signerApplyDeployRBAC(t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	ctx := context.Background()
	const dir, ns = "../../deploy", "ferry-system"
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct{ Resources []string }
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	signing := map[string]bool{} // ClusterRoles that may sign for Ferry's signer
	var bindings []rbacv1.ClusterRoleBinding
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s document %d: %v", r, i, err)
			}
			where := fmt.Sprintf("%s document %d", r, i)
			switch meta.Kind {
			case "ServiceAccount":
				var o corev1.ServiceAccount
				signerDecode(t, where, doc, &o)
				if o.Namespace == "" {
					o.Namespace = ns
				}
				_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			case "ClusterRole":
				var o rbacv1.ClusterRole
				signerDecode(t, where, doc, &o)
				for _, rule := range o.Rules {
					if slices.Contains(rule.Resources, "signers") && slices.Contains(rule.Verbs, "sign") && slices.Contains(rule.ResourceNames, identity.Signer) {
						signing[o.Name] = true
					}
				}
				_, err = admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
			case "ClusterRoleBinding":
				var o rbacv1.ClusterRoleBinding
				signerDecode(t, where, doc, &o)
				for i := range o.Subjects {
					if o.Subjects[i].Kind == rbacv1.ServiceAccountKind && o.Subjects[i].Namespace == "" {
						o.Subjects[i].Namespace = ns
					}
				}
				bindings = append(bindings, o)
				_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
			case "Role":
				var o rbacv1.Role
				signerDecode(t, where, doc, &o)
				if o.Namespace == "" {
					o.Namespace = ns
				}
				_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			case "RoleBinding":
				var o rbacv1.RoleBinding
				signerDecode(t, where, doc, &o)
				if o.Namespace == "" {
					o.Namespace = ns
				}
				_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
			default:
				continue
			}
			if err != nil {
				t.Fatalf("%s (%s): %v", where, meta.Kind, err)
			}
		}
	}
	var accounts []string
	for _, b := range bindings {
		if b.RoleRef.Kind != "ClusterRole" || !signing[b.RoleRef.Name] {
			continue
		}
		for _, s := range b.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				accounts = append(accounts, "system:serviceaccount:"+s.Namespace+":"+s.Name)
			}
		}
	}
	if len(accounts) != 1 {
		t.Fatalf("the manifests bind %q to a ClusterRole that may sign for %s: want one ServiceAccount, the signer's", accounts, identity.Signer)
	}
	return accounts[0]
}

func signerDecode(t *testing.T, where string, doc []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}
