package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	ident "github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// signerFakeRequests is a fake of the requests' API: every write is a
// compare-and-swap on the request's version, and is recorded.
type signerFakeRequests struct {
	mu      sync.Mutex
	byName  map[string]ports.SigningRequest
	order   []string
	writes  []string // "approve name", "deny name: reason", ...
	reasons map[string]string
	certs   map[string][]byte
	changes chan struct{}
	// conflictOnce makes the next write of the named request fail with
	// ErrConflict (another writer won), after changing its version.
	conflictOnce map[string]bool
	lists        int // passes made (List calls)
	// progress is told (without blocking) after each List and each write,
	// so that a test waits on the signer's steps, not on a clock.
	progress chan struct{}
}

func (f *signerFakeRequests) stepped() {
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds, looking again after each of the
// signer's steps, for at most 5 s.
func (f *signerFakeRequests) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-f.progress:
		case <-timeout:
			t.Fatalf("%s: not within 5 s", what)
		}
	}
}

func newSignerFakeRequests() *signerFakeRequests {
	return &signerFakeRequests{byName: map[string]ports.SigningRequest{}, reasons: map[string]string{}, certs: map[string][]byte{},
		changes: make(chan struct{}, 1), conflictOnce: map[string]bool{}, progress: make(chan struct{}, 1)}
}

func (f *signerFakeRequests) add(r ports.SigningRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.Version = "1"
	if _, ok := f.byName[r.Name]; !ok {
		f.order = append(f.order, r.Name)
	}
	f.byName[r.Name] = r
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

func (f *signerFakeRequests) get(name string) ports.SigningRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byName[name]
}

func (f *signerFakeRequests) List(context.Context) ([]ports.SigningRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.stepped()
	f.lists++
	var out []ports.SigningRequest
	for _, n := range f.order {
		out = append(out, f.byName[n])
	}
	return out, nil
}

func (f *signerFakeRequests) Changes() <-chan struct{} { return f.changes }

// write applies change to r if r is the request's current version.
func (f *signerFakeRequests) write(r ports.SigningRequest, what string, change func(*ports.SigningRequest)) (ports.SigningRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.stepped()
	cur, ok := f.byName[r.Name]
	if !ok || cur.Version != r.Version {
		return ports.SigningRequest{}, fmt.Errorf("request %s changed: %w", r.Name, ports.ErrConflict)
	}
	if f.conflictOnce[r.Name] {
		delete(f.conflictOnce, r.Name)
		v, _ := strconv.Atoi(cur.Version)
		cur.Version = strconv.Itoa(v + 1)
		f.byName[r.Name] = cur
		return ports.SigningRequest{}, fmt.Errorf("request %s changed: %w", r.Name, ports.ErrConflict)
	}
	change(&cur)
	v, _ := strconv.Atoi(cur.Version)
	cur.Version = strconv.Itoa(v + 1)
	f.byName[r.Name] = cur
	f.writes = append(f.writes, what+" "+r.Name)
	return cur, nil
}

func (f *signerFakeRequests) Approve(_ context.Context, r ports.SigningRequest, reason string) (ports.SigningRequest, error) {
	return f.write(r, "approve", func(c *ports.SigningRequest) { c.Approved = true; f.reasons[r.Name] = reason })
}

func (f *signerFakeRequests) Deny(_ context.Context, r ports.SigningRequest, reason string) error {
	_, err := f.write(r, "deny", func(c *ports.SigningRequest) { c.Denied = true; f.reasons[r.Name] = reason })
	return err
}

func (f *signerFakeRequests) Fail(_ context.Context, r ports.SigningRequest, reason string) error {
	_, err := f.write(r, "fail", func(c *ports.SigningRequest) { c.Failed = true; f.reasons[r.Name] = reason })
	return err
}

func (f *signerFakeRequests) Issue(_ context.Context, r ports.SigningRequest, cert []byte) error {
	_, err := f.write(r, "issue", func(c *ports.SigningRequest) { c.Issued = true; f.certs[r.Name] = cert })
	return err
}

func (f *signerFakeRequests) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.writes...)
}

// signerFakeCA is a fake peer CA: it records what it signed and for how long.
type signerFakeCA struct {
	mu       sync.Mutex
	notAfter time.Time
	err      error // of every call, when set
	signErr  error // of Sign, when set
	signed   map[string]time.Duration
}

func (c *signerFakeCA) NotAfter(context.Context) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notAfter, c.err
}

func (c *signerFakeCA) Sign(_ context.Context, csr []byte, lifetime time.Duration) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	if c.signErr != nil {
		return nil, c.signErr
	}
	if c.signed == nil {
		c.signed = map[string]time.Duration{}
	}
	c.signed[string(csr)] = lifetime
	return []byte("certificate for " + string(csr[:20])), nil
}

func (c *signerFakeCA) lifetimeOf(csr []byte) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.signed[string(csr)]
	return d, ok
}

var signerT0 = time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestSigner(reqs *signerFakeRequests, c *signerFakeCA) *Signer {
	s := NewSigner(SignerConfig{Namespace: "ferry-system", MaxLifetime: 30 * 24 * time.Hour}, reqs, c, zap.NewNop())
	s.now = func() time.Time { return signerT0 }
	return s
}

// signerNames are what a CSR asks to be named.
type signerNames struct {
	cn    string
	org   []string
	dns   []string
	uris  []string
	email []string
}

func signerCSRPEM(t *testing.T, n signerNames) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: n.cn, Organization: n.org}, DNSNames: n.dns, EmailAddresses: n.email}
	for _, u := range n.uris {
		p, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, p)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// signerOwnNames are what node's daemon asks for.
func signerOwnNames(node string) signerNames {
	return signerNames{cn: node, dns: []string{ident.ServerName}, uris: []string{ident.URI(node)}}
}

// signerFromNode is a request by node's daemon, naming n.
func signerFromNode(t *testing.T, name, node string, n signerNames) ports.SigningRequest {
	return ports.SigningRequest{Name: name, CSR: signerCSRPEM(t, n), Username: NodeAccount("ferry-system"),
		Extra: map[string][]string{ident.NodeNameExtra: {node}}, Usages: []string{"digital signature", "server auth", "client auth"}}
}

func TestARequestNamingItsOwnNodeIsApprovedAndIssued(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	r := signerFromNode(t, "csr-a", "node-a", signerOwnNames("node-a"))
	r.Expiration = 2 * time.Hour
	reqs.add(r)
	s := newTestSigner(reqs, c)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(reqs.written(), ", "), "approve csr-a, issue csr-a"; got != want {
		t.Fatalf("writes: %s, want %s", got, want)
	}
	if d, ok := c.lifetimeOf(r.CSR); !ok || d != 2*time.Hour {
		t.Errorf("signed for %v (%v), want the 2h asked", d, ok)
	}
	if !strings.Contains(reqs.reasons["csr-a"], "node-a") {
		t.Errorf("approval reason %q names no node", reqs.reasons["csr-a"])
	}
	// Answered: a second pass writes nothing.
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := reqs.written(); len(got) != 2 {
		t.Errorf("a second pass wrote again: %q", got)
	}
}

func TestTheLifetimeIsWhatWasAskedWithinBoundsAndTheCAsLife(t *testing.T) {
	cases := []struct {
		name   string
		asked  time.Duration
		caLeft time.Duration
		want   time.Duration
	}{
		{"none asked: the most", 0, 365 * 24 * time.Hour, 30 * 24 * time.Hour},
		{"too short: an hour", 10 * time.Minute, 365 * 24 * time.Hour, time.Hour},
		{"too long: the most", 90 * 24 * time.Hour, 365 * 24 * time.Hour, 30 * 24 * time.Hour},
		{"never past the CA", 0, 3 * time.Hour, 3 * time.Hour},
		{"never past the CA, even under the least", 0, 20 * time.Minute, 20 * time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(tc.caLeft)}
			r := signerFromNode(t, "csr", "node-a", signerOwnNames("node-a"))
			r.Expiration = tc.asked
			reqs.add(r)
			if err := newTestSigner(reqs, c).Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d, ok := c.lifetimeOf(r.CSR); !ok || d != tc.want {
				t.Errorf("signed for %v (%v), want %v", d, ok, tc.want)
			}
		})
	}
}

func TestRequestsDecideRefusesAreDeniedAndNeverSigned(t *testing.T) {
	tampered := signerCSRPEM(t, signerOwnNames("node-a"))
	block, _ := pem.Decode(tampered)
	block.Bytes[len(block.Bytes)-3] ^= 0x55 // in the signature
	tampered = pem.EncodeToMemory(block)
	cases := []struct {
		r    ports.SigningRequest
		says string
	}{
		{signerFromNode(t, "other-node", "node-a", signerOwnNames("node-b")), `common name "node-b" is not the requester's node "node-a"`},
		{signerFromNode(t, "other-uri", "node-a", signerNames{cn: "node-a", uris: []string{ident.URI("node-b")}}), "URIs"},
		{signerFromNode(t, "two-uris", "node-a", signerNames{cn: "node-a", uris: []string{ident.URI("node-a"), ident.URI("node-b")}}), "URIs"},
		{signerFromNode(t, "organization", "node-a", signerNames{cn: "node-a", org: []string{"system:masters"}, uris: []string{ident.URI("node-a")}}), "organization"},
		{signerFromNode(t, "dns-name", "node-a", signerNames{cn: "node-a", dns: []string{"kubernetes.default"}, uris: []string{ident.URI("node-a")}}), "DNS name"},
		{signerFromNode(t, "email", "node-a", signerNames{cn: "node-a", email: []string{"a@b.c"}, uris: []string{ident.URI("node-a")}}), "e-mail"},
		{signerWith(signerFromNode(t, "other-account", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) {
			r.Username = "system:serviceaccount:elsewhere:ferry-node"
		}), "not by Ferry's node daemon"},
		{signerWith(signerFromNode(t, "no-node", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) { r.Extra = nil }), "names no node"},
		{signerWith(signerFromNode(t, "code-signing", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) {
			r.Usages = append(r.Usages, "code signing")
		}), "code signing"},
		{signerWith(signerFromNode(t, "bad-signature", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) { r.CSR = tampered }), "not signed by the key it names"},
		{signerWith(signerFromNode(t, "garbage", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) {
			r.CSR = []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
		}), "cannot be read"},
		{signerWith(signerFromNode(t, "not-pem", "node-a", signerOwnNames("node-a")), func(r *ports.SigningRequest) { r.CSR = []byte("hello") }), "no PEM block"},
	}
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	for _, tc := range cases {
		reqs.add(tc.r)
	}
	if err := newTestSigner(reqs, c).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		got := reqs.get(tc.r.Name)
		if !got.Denied || got.Approved || got.Issued {
			t.Errorf("%s: %+v, want denied only", tc.r.Name, got)
		}
		if !strings.Contains(reqs.reasons[tc.r.Name], tc.says) {
			t.Errorf("%s: denied for %q, want a reason saying %q", tc.r.Name, reqs.reasons[tc.r.Name], tc.says)
		}
	}
	if len(c.signed) != 0 {
		t.Errorf("the CA signed %d requests Decide refuses", len(c.signed))
	}
}

func signerWith(r ports.SigningRequest, change func(*ports.SigningRequest)) ports.SigningRequest {
	change(&r)
	return r
}

// An administrator's approval does not make a certificate: what Decide
// refuses is marked failed and never signed; what it grants is issued.
func TestARequestApprovedBySomeoneElseIsSignedOnlyWhenDecideGrantsIt(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	wrong := signerFromNode(t, "wrong", "node-a", signerOwnNames("node-b"))
	wrong.Approved = true
	right := signerFromNode(t, "right", "node-a", signerOwnNames("node-a"))
	right.Approved = true
	reqs.add(wrong)
	reqs.add(right)
	if err := newTestSigner(reqs, c).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(reqs.written(), ", "), "fail wrong, issue right"; got != want {
		t.Fatalf("writes: %s, want %s", got, want)
	}
	if !strings.Contains(reqs.reasons["wrong"], `common name "node-b"`) {
		t.Errorf("failed for %q, want Decide's reason", reqs.reasons["wrong"])
	}
	if _, ok := c.lifetimeOf(wrong.CSR); ok {
		t.Error("the CA signed a request Decide refuses")
	}
}

func TestRequestsAnsweredAlreadyAreLeftAlone(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	for name, set := range map[string]func(*ports.SigningRequest){
		"denied":          func(r *ports.SigningRequest) { r.Denied = true },
		"failed":          func(r *ports.SigningRequest) { r.Approved, r.Failed = true, true },
		"issued":          func(r *ports.SigningRequest) { r.Approved, r.Issued = true, true },
		"denied-wrong":    func(r *ports.SigningRequest) { r.Denied = true; r.Username = "someone" },
		"issued-by-other": func(r *ports.SigningRequest) { r.Issued = true },
	} {
		reqs.add(signerWith(signerFromNode(t, name, "node-a", signerOwnNames("node-a")), set))
	}
	if err := newTestSigner(reqs, c).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := reqs.written(); len(w) != 0 {
		t.Errorf("wrote %q", w)
	}
}

// A write that loses to another writer is no error: the request is read
// again and judged anew on the next pass.
func TestAConflictIsRetriedOnTheNextPass(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	reqs.add(signerFromNode(t, "csr", "node-a", signerOwnNames("node-a")))
	reqs.conflictOnce["csr"] = true
	s := newTestSigner(reqs, c)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("a conflict is no error: %v", err)
	}
	if w := reqs.written(); len(w) != 0 {
		t.Fatalf("wrote %q through a conflict", w)
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(reqs.written(), ", "), "approve csr, issue csr"; got != want {
		t.Fatalf("writes: %s, want %s", got, want)
	}
}

// The CA away (its files unreadable, its key not its certificate's,
// expired) leaves an approved request waiting, retried until the CA is
// back; a CSR the CA can never sign fails.
func TestTheCAAwayLeavesTheRequestApprovedUntilItIsBack(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour), err: errors.New("open /ca/tls.key: no such file")}
	reqs.add(signerFromNode(t, "csr", "node-a", signerOwnNames("node-a")))
	s := newTestSigner(reqs, c)
	if err := s.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "tls.key") {
		t.Fatalf("Sync: %v, want the CA's error", err)
	}
	if got := reqs.get("csr"); !got.Approved || got.Issued || got.Failed {
		t.Fatalf("%+v, want approved and waiting", got)
	}
	c.mu.Lock()
	c.err, c.notAfter = nil, signerT0.Add(-time.Minute)
	c.mu.Unlock()
	if err := s.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("Sync: %v, want the CA expired", err)
	}
	c.mu.Lock()
	c.notAfter = signerT0.Add(365 * 24 * time.Hour)
	c.mu.Unlock()
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := reqs.get("csr"); !got.Issued {
		t.Fatalf("%+v, want issued once the CA is back", got)
	}

	reqs.add(signerFromNode(t, "weak", "node-a", signerOwnNames("node-a")))
	c.mu.Lock()
	c.signErr = fmt.Errorf("an RSA key of 1024 bits: 2048 at least: %w", ports.ErrInvalid)
	c.mu.Unlock()
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := reqs.get("weak"); !got.Failed || got.Issued || !strings.Contains(reqs.reasons["weak"], "1024 bits") {
		t.Fatalf("%+v (%q), want failed for the CA's reason", got, reqs.reasons["weak"])
	}
}

// A request made while the signer runs is answered at once (a change),
// and Run ends with its context.
func TestRunAnswersANewRequestAtOnce(t *testing.T) {
	reqs, c := newSignerFakeRequests(), &signerFakeCA{notAfter: signerT0.Add(365 * 24 * time.Hour)}
	s := NewSigner(SignerConfig{Namespace: "ferry-system", Resync: time.Hour}, reqs, c, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	reqs.waitFor(t, "the signer's first pass, with no request", func() bool {
		reqs.mu.Lock()
		defer reqs.mu.Unlock()
		return reqs.lists > 0
	})
	reqs.add(signerFromNode(t, "csr", "node-a", signerOwnNames("node-a")))
	reqs.waitFor(t, "a new request answered with a resync of an hour", func() bool { return reqs.get("csr").Issued })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

func TestALongReasonIsCut(t *testing.T) {
	long := strings.Repeat("é", 2000)
	got := signerClip(long)
	if len(got) > signerMaxReason+len("... (cut)") || !strings.HasSuffix(got, "... (cut)") || !utf8.ValidString(got) {
		t.Errorf("signerClip: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
	if signerClip("short") != "short" {
		t.Error("a short reason was changed")
	}
}
