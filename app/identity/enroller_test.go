package identity

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
	"math/big"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	ident "github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// The enroller's tests run on a clock of their own (enrollClock); the
// signer is played by enrollFakeCA, the host directory by
// enrollFakeFiles.

var enrollT0 = time.Date(2031, 6, 1, 8, 0, 0, 0, time.UTC)

type enrollClock struct {
	t      time.Time
	waits  []time.Duration
	stopAt time.Time          // the sleep ends the run (cancel) once the clock passes it
	cancel context.CancelFunc // for stopAt
	onWait func()             // called after each wait, the clock moved
}

func (c *enrollClock) now() time.Time { return c.t }

func (c *enrollClock) sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	c.waits = append(c.waits, d)
	c.t = c.t.Add(d)
	if c.onWait != nil {
		c.onWait()
	}
	if !c.stopAt.IsZero() && !c.t.Before(c.stopAt) {
		c.cancel()
		return false
	}
	return true
}

type enrollTestCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newEnrollTestCA(t *testing.T) *enrollTestCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test peer CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: enrollT0.Add(-365 * 24 * time.Hour), NotAfter: enrollT0.Add(10 * 365 * 24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &enrollTestCA{cert: cert, key: key}
}

func (ca *enrollTestCA) rootsPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// pair issues a certificate naming node, valid from notBefore to
// notAfter, and its key, as PEM; shape changes the certificate first.
func (ca *enrollTestCA) pair(t *testing.T, node string, notBefore, notAfter time.Time, shape func(*x509.Certificate)) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(ident.URI(node))
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: node}, DNSNames: []string{ident.ServerName}, URIs: []*url.URL{u},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	pub := any(&key.PublicKey)
	if shape != nil {
		shape(tmpl)
		if tmpl.PublicKey != nil {
			pub = tmpl.PublicKey
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// enrollFakeCA is Ferry's signer as the node sees it: it issues, from
// the clock's now, a certificate for the lifetime asked (backdated five
// minutes), or fails with the next of errs.
type enrollFakeCA struct {
	t      *testing.T
	ca     *enrollTestCA
	clock  *enrollClock
	errs   []error
	shape  func(*x509.Certificate)
	asked  []time.Duration
	issued [][]byte // the keys issued
}

func (f *enrollFakeCA) Enroll(_ context.Context, node string, lifetime time.Duration) ([]byte, []byte, error) {
	f.asked = append(f.asked, lifetime)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return nil, nil, err
		}
	}
	now := f.clock.now()
	c, k := f.ca.pair(f.t, node, now.Add(-5*time.Minute), now.Add(lifetime), f.shape)
	f.issued = append(f.issued, k)
	return c, k, nil
}

type enrollFakeFiles struct {
	cert, key []byte
	saves     int
	saveErr   error
}

func (f *enrollFakeFiles) Load() ([]byte, []byte, error) {
	if f.cert == nil || f.key == nil {
		return nil, nil, ports.ErrNotFound
	}
	return f.cert, f.key, nil
}

func (f *enrollFakeFiles) Save(cert, key []byte) error {
	if f.saveErr != nil {
		return f.saveErr
	}
	f.cert, f.key = cert, key
	f.saves++
	return nil
}

type enrollRoots []byte

func (r enrollRoots) Roots() ([]byte, error) { return r, nil }

// enrollBundle is a CA bundle that changes while the Enroller runs, as a
// mounted Secret's ca.crt does.
type enrollBundle struct {
	cas []*enrollTestCA
	err error
}

func (b *enrollBundle) Roots() ([]byte, error) {
	if b.err != nil {
		return nil, b.err
	}
	var out []byte
	for _, ca := range b.cas {
		out = append(out, ca.rootsPEM()...)
	}
	return out, nil
}

type enrollFixture struct {
	clock *enrollClock
	ca    *enrollTestCA
	api   *enrollFakeCA
	files *enrollFakeFiles
	logs  *observer.ObservedLogs
	e     *Enroller
}

func newEnrollFixture(t *testing.T, cfg EnrollerConfig, opts ...EnrollerOption) *enrollFixture {
	if cfg.Node == "" {
		cfg.Node = "node-a"
	}
	clock := &enrollClock{t: enrollT0}
	ca := newEnrollTestCA(t)
	core, logs := observer.New(zapcore.InfoLevel)
	f := &enrollFixture{clock: clock, ca: ca, api: &enrollFakeCA{t: t, ca: ca, clock: clock}, files: &enrollFakeFiles{}, logs: logs}
	f.e = NewEnroller(cfg, f.api, f.files, clock.now, zap.New(core), opts...)
	f.e.sleep = clock.sleep
	return f
}

// leaf is the certificate the files hold now.
func (f *enrollFixture) leaf(t *testing.T) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(f.files.cert, f.files.key)
	if err != nil {
		t.Fatalf("the files hold no pair: %v", err)
	}
	return pair.Leaf
}

func (f *enrollFixture) logged(level zapcore.Level, substr string) int {
	n := 0
	for _, e := range f.logs.All() {
		if e.Level == level && strings.Contains(e.Message, substr) {
			n++
		}
	}
	return n
}

func TestEnsureWithoutAPairAsksForOneAndPutsItInPlace(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.api.asked) != 1 || f.api.asked[0] != DefaultEnrollLifetime {
		t.Fatalf("asked for %v, want one certificate of %s", f.api.asked, DefaultEnrollLifetime)
	}
	if f.files.saves != 1 {
		t.Fatalf("%d saves, want 1", f.files.saves)
	}
	leaf := f.leaf(t)
	if na, ok := f.e.Current(); !ok || !na.Equal(leaf.NotAfter) {
		t.Errorf("Current = %s, %v; want %s", na, ok, leaf.NotAfter)
	}
	if f.logged(zapcore.InfoLevel, "obtained a peer certificate") != 1 {
		t.Errorf("no log of the certificate obtained: %v", f.logs.All())
	}
}

func TestEnsureUsesAGoodPairInPlaceWithoutAsking(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	f.files.cert, f.files.key = f.ca.pair(t, "node-a", enrollT0.Add(-24*time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(f.api.asked) != 0 || f.files.saves != 0 {
		t.Fatalf("asked %v, saved %d times: the pair in place is good", f.api.asked, f.files.saves)
	}
	if f.logged(zapcore.InfoLevel, "using the peer certificate in place") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
}

func TestEnsureReplacesAPairInPlaceThatIsNoGood(t *testing.T) {
	for name, pairOf := range map[string]func(f *enrollFixture) ([]byte, []byte){
		"another node's": func(f *enrollFixture) ([]byte, []byte) {
			return f.ca.pair(t, "node-b", enrollT0.Add(-time.Hour), enrollT0.Add(time.Hour*24), nil)
		},
		"expired": func(f *enrollFixture) ([]byte, []byte) {
			return f.ca.pair(t, "node-a", enrollT0.Add(-30*24*time.Hour), enrollT0.Add(-time.Second), nil)
		},
		"not valid yet": func(f *enrollFixture) ([]byte, []byte) {
			return f.ca.pair(t, "node-a", enrollT0.Add(time.Hour), enrollT0.Add(30*24*time.Hour), nil)
		},
		"a key not the certificate's": func(f *enrollFixture) ([]byte, []byte) {
			c, _ := f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(24*time.Hour), nil)
			_, k := f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(24*time.Hour), nil)
			return c, k
		},
		"naming no node": func(f *enrollFixture) ([]byte, []byte) {
			return f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(24*time.Hour), func(c *x509.Certificate) { c.URIs = nil })
		},
		"garbage": func(*enrollFixture) ([]byte, []byte) { return []byte("cert"), []byte("key") },
	} {
		t.Run(name, func(t *testing.T) {
			f := newEnrollFixture(t, EnrollerConfig{})
			f.files.cert, f.files.key = pairOf(f)
			if err := f.e.Ensure(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(f.api.asked) != 1 || f.files.saves != 1 {
				t.Fatalf("asked %d times, saved %d times; want a new pair", len(f.api.asked), f.files.saves)
			}
			f.leaf(t)
			if f.logged(zapcore.WarnLevel, "is not used") != 1 {
				t.Errorf("no warning of the pair in place refused: %v", f.logs.All())
			}
		})
	}
}

func TestEnsureWithoutAPairFailsWhenTheSignerIsAway(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	f.api.errs = []error{errors.New("connection refused")}
	err := f.e.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "node-a") {
		t.Fatalf("Ensure = %v", err)
	}
	if f.files.saves != 0 {
		t.Fatal("saved without a certificate")
	}
	if _, ok := f.e.Current(); ok {
		t.Fatal("Current says a pair is in place")
	}
}

func TestEnsureKeepsAPairDueForRenewalWhenTheSignerIsAway(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	// Issued 25 days ago for 30: past RenewAt (20 days), 5 days left.
	nb, na := enrollT0.Add(-25*24*time.Hour), enrollT0.Add(5*24*time.Hour)
	f.files.cert, f.files.key = f.ca.pair(t, "node-a", nb, na, nil)
	before := string(f.files.cert)
	f.api.errs = []error{errors.New("the API server is away")}
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatalf("Ensure = %v, want nil: the pair in place is still good", err)
	}
	if len(f.api.asked) != 1 {
		t.Fatalf("asked %d times, want a renewal tried", len(f.api.asked))
	}
	if string(f.files.cert) != before {
		t.Fatal("the pair in place was replaced")
	}
	if f.logged(zapcore.WarnLevel, "the one in place stays in use") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
	if got, ok := f.e.Current(); !ok || !got.Equal(na) {
		t.Errorf("Current = %s, %v", got, ok)
	}
}

func TestACertificateIssuedThatIsNoGoodIsNotPutInPlace(t *testing.T) {
	for name, shape := range map[string]func(*x509.Certificate){
		"another node's": func(c *x509.Certificate) { u, _ := url.Parse(ident.URI("node-b")); c.URIs = []*url.URL{u} },
		"two nodes": func(c *x509.Certificate) {
			u, _ := url.Parse(ident.URI("node-b"))
			c.URIs = append(c.URIs, u)
		},
		"expired":       func(c *x509.Certificate) { c.NotAfter = enrollT0.Add(-time.Minute) },
		"not valid yet": func(c *x509.Certificate) { c.NotBefore = enrollT0.Add(time.Hour) },
		"for another key": func(c *x509.Certificate) {
			k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			c.PublicKey = &k.PublicKey
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newEnrollFixture(t, EnrollerConfig{})
			f.api.shape = shape
			err := f.e.Ensure(context.Background())
			if err == nil || !strings.Contains(err.Error(), "not used") {
				t.Fatalf("Ensure = %v", err)
			}
			if f.files.saves != 0 {
				t.Fatal("put in place")
			}
		})
	}
}

func TestRunRenewsAtRenewAtWithANewKey(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{Lifetime: 30 * 24 * time.Hour})
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := f.leaf(t)
	renewAt := ident.RenewAt(first.NotBefore, first.NotAfter)
	var renewedAt []time.Time
	saves := f.files.saves
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel = cancel
	// Two renewals: stop a little after the second one's time.
	f.clock.stopAt = enrollT0.Add(41 * 24 * time.Hour)
	api := f.api
	prevIssued := len(api.issued)
	f.clock.onWait = func() {
		if f.files.saves != saves {
			saves = f.files.saves
			renewedAt = append(renewedAt, f.clock.t)
		}
	}
	f.e.Run(ctx)
	if len(api.issued)-prevIssued != 2 {
		t.Fatalf("%d renewals, want 2", len(api.issued)-prevIssued)
	}
	// The first renewal came at RenewAt, not before, not a nap later.
	if len(renewedAt) == 0 {
		t.Fatal("no renewal seen")
	}
	if at := renewedAt[0]; at.Before(renewAt) || at.Sub(renewAt) > enrollNap {
		t.Errorf("renewed at %s, RenewAt is %s", at, renewAt)
	}
	for _, w := range f.clock.waits {
		if w > enrollNap {
			t.Fatalf("a wait of %s: more than a nap", w)
		}
	}
	keys := map[string]bool{}
	for _, k := range api.issued {
		keys[string(k)] = true
	}
	if len(keys) != len(api.issued) {
		t.Error("a key was used twice")
	}
	if string(f.files.key) != string(api.issued[len(api.issued)-1]) {
		t.Error("the key in place is not the last one issued")
	}
	if n := f.logged(zapcore.InfoLevel, "renewed the peer certificate"); n != 2 {
		t.Errorf("%d renewals logged, want 2", n)
	}
	for _, e := range f.logs.FilterMessage("renewed the peer certificate").All() {
		if _, ok := e.ContextMap()["notAfter"]; !ok {
			t.Errorf("a renewal logged without notAfter: %v", e.ContextMap())
		}
	}
}

func TestRunRetriesWithBackoffAndKeepsThePairUntilANewOneIsWritten(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	// 12 hours left, past RenewAt: renewals fail 5 times, then succeed.
	f.files.cert, f.files.key = f.ca.pair(t, "node-a", enrollT0.Add(-29*24*time.Hour-12*time.Hour), enrollT0.Add(12*time.Hour), nil)
	before := string(f.files.cert)
	away := errors.New("the API server is away")
	f.api.errs = []error{away, away, away, away, away, away}
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel = cancel
	f.clock.onWait = func() {
		if f.files.saves > 0 {
			cancel()
		} else if string(f.files.cert) != before {
			t.Fatal("the pair in place changed without a save")
		}
	}
	f.e.Run(ctx)
	if f.files.saves != 1 {
		t.Fatalf("%d saves, want the renewal in place at last", f.files.saves)
	}
	// Ensure's failure, then Run's five: 30 s, 1, 2, 4 minutes, then 5 at most.
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	if len(f.clock.waits) < len(want) {
		t.Fatalf("waits %v, want %v first", f.clock.waits, want)
	}
	for i, w := range want {
		if f.clock.waits[i] != w {
			t.Fatalf("waits %v, want %v first", f.clock.waits, want)
		}
	}
	if n := f.logged(zapcore.WarnLevel, "expires soon"); n != 6 {
		t.Errorf("%d warnings that the certificate expires soon, want 6 (one per failure)", n)
	}
	if f.logged(zapcore.InfoLevel, "renewed the peer certificate") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
}

func TestRunObtainsACertificateEnsureCouldNot(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	f.api.errs = []error{errors.New("denied: no node")}
	if err := f.e.Ensure(context.Background()); err == nil {
		t.Fatal("Ensure succeeded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel = cancel
	f.clock.onWait = func() {
		if f.files.saves > 0 {
			cancel()
		}
	}
	f.e.Run(ctx)
	if f.files.saves != 1 || len(f.api.asked) != 2 {
		t.Fatalf("%d saves after %d requests", f.files.saves, len(f.api.asked))
	}
	if f.clock.waits[0] != DefaultEnrollRetry {
		t.Errorf("Run asked again after %s, want %s after Ensure's failure", f.clock.waits[0], DefaultEnrollRetry)
	}
	if f.logged(zapcore.InfoLevel, "obtained a peer certificate") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
}

func TestRunWithoutEnsureLooksAtThePairInPlace(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	f.files.cert, f.files.key = f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(24*time.Hour)
	f.e.Run(ctx)
	if len(f.api.asked) != 0 {
		t.Fatalf("asked %d times within a day of a good pair", len(f.api.asked))
	}
}

func TestAPairInPlaceFromAnotherCAIsRenewedAtOnce(t *testing.T) {
	trusted := newEnrollTestCA(t)
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(enrollRoots(trusted.rootsPEM())))
	f.api.ca = trusted
	other := newEnrollTestCA(t) // the CA of an earlier installation
	f.files.cert, f.files.key = other.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	before := string(f.files.cert)

	f.api.errs = []error{errors.New("the API server is away")}
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatalf("Ensure = %v: the pair in place is still to be used while it cannot be renewed", err)
	}
	if len(f.api.asked) != 1 || string(f.files.cert) != before {
		t.Fatalf("asked %d times, pair replaced %v", len(f.api.asked), string(f.files.cert) != before)
	}
	if f.logged(zapcore.WarnLevel, "not signed by the peer CA") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.files.saves != 1 {
		t.Fatal("not renewed once the signer answered")
	}
	// A pair of the trusted CA is used without asking.
	g := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(enrollRoots(trusted.rootsPEM())))
	g.files.cert, g.files.key = trusted.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	if err := g.e.Ensure(context.Background()); err != nil || len(g.api.asked) != 0 {
		t.Fatalf("Ensure = %v after %d requests, want the trusted pair used", err, len(g.api.asked))
	}
}

func TestAFailedSaveKeepsThePairAndIsRetried(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{})
	f.files.saveErr = errors.New("read-only file system")
	err := f.e.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("Ensure = %v", err)
	}
	if _, ok := f.e.Current(); ok {
		t.Fatal("Current says a pair is in place")
	}
}

func TestRequestsComeNoCloserThanRetry(t *testing.T) {
	// A signer that issues certificates already due (a short life, far
	// backdated) is not asked again at once.
	f := newEnrollFixture(t, EnrollerConfig{})
	f.api.shape = func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = enrollT0.Add(-2*time.Hour), enrollT0.Add(10*time.Minute)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(time.Minute)
	f.e.Run(ctx)
	if n := len(f.api.asked); n < 2 || n > 1+int(time.Minute/DefaultEnrollRetry) {
		t.Fatalf("%d requests within a minute, want 2 or 3 (every %s)", n, DefaultEnrollRetry)
	}
}

func TestACertificateIssuedByACANotInTheBundleIsNotPutInPlace(t *testing.T) {
	// The signer already issues from a new CA that the bundle peers trust
	// does not hold yet (a CA rotation done in the wrong order).
	current, next := newEnrollTestCA(t), newEnrollTestCA(t)
	bundle := &enrollBundle{cas: []*enrollTestCA{current}}
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(bundle))
	f.api.ca = next
	// A pair of the current CA, due for renewal, 5 days left.
	f.files.cert, f.files.key = current.pair(t, "node-a", enrollT0.Add(-25*24*time.Hour), enrollT0.Add(5*24*time.Hour), nil)
	before := string(f.files.cert)

	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatalf("Ensure = %v, want nil: the pair in place is still good", err)
	}
	if len(f.api.asked) != 1 {
		t.Fatalf("asked %d times, want a renewal tried", len(f.api.asked))
	}
	if f.files.saves != 0 || string(f.files.cert) != before {
		t.Fatal("a certificate peers would refuse replaced the pair in place")
	}
	warned := f.logs.FilterMessage("could not renew the peer certificate; the one in place stays in use").All()
	if len(warned) != 1 || !strings.Contains(warned[0].ContextMap()["error"].(string), "is not in the peer CA bundle") {
		t.Fatalf("want one warning naming the signer's CA missing from the bundle: %v", f.logs.All())
	}

	// Run backs off as after any failure, keeps the pair, and takes a
	// certificate of the new CA once the bundle holds it.
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel = cancel
	f.clock.onWait = func() {
		switch {
		case f.files.saves > 0:
			cancel()
		case len(f.api.asked) == 4:
			bundle.cas = []*enrollTestCA{current, next}
		case string(f.files.cert) != before:
			t.Fatal("the pair in place changed without a save")
		}
	}
	f.e.Run(ctx)
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute}
	if len(f.clock.waits) < len(want) || !slices.Equal(f.clock.waits[:len(want)], want) {
		t.Fatalf("waits %v, want %v first: each refused certificate is a failed attempt", f.clock.waits, want)
	}
	if f.files.saves != 1 {
		t.Fatalf("%d saves, want the new CA's certificate once the bundle holds it", f.files.saves)
	}
	if got := f.leaf(t); got.CheckSignatureFrom(next.cert) != nil {
		t.Fatal("the certificate in place is not the new CA's")
	}
	if f.logged(zapcore.InfoLevel, "renewed the peer certificate") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
}

func TestWithoutAPairACertificateIssuedByACANotInTheBundleIsAnError(t *testing.T) {
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(enrollRoots(newEnrollTestCA(t).rootsPEM())))
	err := f.e.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "is not in the peer CA bundle") {
		t.Fatalf("Ensure = %v", err)
	}
	if f.files.saves != 0 {
		t.Fatal("put in place")
	}
	if _, ok := f.e.Current(); ok {
		t.Fatal("Current says a pair is in place")
	}
}

func TestACertificateIssuedIsNotPutInPlaceWhileTheBundleCannotBeRead(t *testing.T) {
	bundle := &enrollBundle{err: errors.New("permission denied")}
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(bundle))
	err := f.e.Ensure(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot be checked") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Ensure = %v", err)
	}
	if f.files.saves != 0 {
		t.Fatal("put in place unchecked")
	}
	bundle.err, bundle.cas = nil, []*enrollTestCA{f.ca}
	if err := f.e.Ensure(context.Background()); err != nil || f.files.saves != 1 {
		t.Fatalf("Ensure = %v, %d saves, once the bundle is readable", err, f.files.saves)
	}
}

func TestAPairWhoseCAIsDroppedFromTheBundleIsRenewedAtOnce(t *testing.T) {
	// A CA rotation: the bundle holds both CAs, the signer issues from
	// the new one, then the old one is dropped from the bundle.
	old, next := newEnrollTestCA(t), newEnrollTestCA(t)
	bundle := &enrollBundle{cas: []*enrollTestCA{old, next}}
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(bundle))
	f.api.ca = next
	// The old CA's pair, a day old: not due for 19 days.
	f.files.cert, f.files.key = old.pair(t, "node-a", enrollT0.Add(-24*time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	if err := f.e.Ensure(context.Background()); err != nil || len(f.api.asked) != 0 {
		t.Fatalf("Ensure = %v after %d requests, want the pair in place used", err, len(f.api.asked))
	}
	dropAt := enrollT0.Add(24 * time.Hour)
	var renewedAt time.Time
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(3*24*time.Hour)
	f.clock.onWait = func() {
		if !f.clock.t.Before(dropAt) {
			bundle.cas = []*enrollTestCA{next}
		}
		if f.files.saves > 0 && renewedAt.IsZero() {
			renewedAt = f.clock.t
		}
	}
	f.e.Run(ctx)
	if f.files.saves != 1 || len(f.api.asked) != 1 {
		t.Fatalf("%d saves after %d requests, want one renewal once the old CA left the bundle", f.files.saves, len(f.api.asked))
	}
	if renewedAt.Sub(dropAt) > 2*enrollNap {
		t.Errorf("renewed at %s, the CA was dropped at %s: more than a nap later", renewedAt, dropAt)
	}
	if f.leaf(t).CheckSignatureFrom(next.cert) != nil {
		t.Fatal("the certificate in place is not the new CA's")
	}
	if f.logged(zapcore.WarnLevel, "no longer signed by a CA peers verify with") != 1 {
		t.Errorf("logs: %v", f.logs.All())
	}
}

func TestAPairWhoseCAIsDroppedStaysInPlaceUntilATrustedOneIsIssued(t *testing.T) {
	// The bundle dropped the CA of the pair in place, and the signer
	// still issues from it (its Secret not updated yet): each renewal is
	// refused, the pair stays, and the next certificate of the new CA
	// replaces it.
	old, next := newEnrollTestCA(t), newEnrollTestCA(t)
	bundle := &enrollBundle{cas: []*enrollTestCA{old}}
	f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(bundle))
	f.api.ca = old
	f.files.cert, f.files.key = old.pair(t, "node-a", enrollT0.Add(-24*time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	before := string(f.files.cert)
	if err := f.e.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	bundle.cas = []*enrollTestCA{next}
	ctx, cancel := context.WithCancel(context.Background())
	// Within a day: the pair is not due for 19 days by its time.
	f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(24*time.Hour)
	f.clock.onWait = func() {
		switch {
		case f.files.saves > 0:
			cancel()
		case len(f.api.asked) == 3:
			f.api.ca = next
		case string(f.files.cert) != before:
			t.Fatal("the pair in place changed without a save")
		}
	}
	f.e.Run(ctx)
	if len(f.api.asked) != 4 || f.files.saves != 1 {
		t.Fatalf("%d requests, %d saves; want three refused, the fourth put in place", len(f.api.asked), f.files.saves)
	}
	if f.leaf(t).CheckSignatureFrom(next.cert) != nil {
		t.Fatal("the certificate in place is not the new CA's")
	}
}

func TestABundleThatCannotBeReadRenewsNothing(t *testing.T) {
	for name, unreadableAtStart := range map[string]bool{"at start": true, "later": false} {
		t.Run(name, func(t *testing.T) {
			bundle := &enrollBundle{}
			f := newEnrollFixture(t, EnrollerConfig{}, WithEnrollerRoots(bundle))
			bundle.cas = []*enrollTestCA{f.ca}
			f.files.cert, f.files.key = f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
			unreadable := errors.New("no such file or directory")
			if unreadableAtStart {
				bundle.err = unreadable
			}
			if err := f.e.Ensure(context.Background()); err != nil {
				t.Fatal(err)
			}
			bundle.err = unreadable
			ctx, cancel := context.WithCancel(context.Background())
			f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(24*time.Hour)
			f.e.Run(ctx)
			if len(f.api.asked) != 0 {
				t.Fatalf("asked %d times: a bundle that cannot be read says nothing of the pair in place", len(f.api.asked))
			}
		})
	}
}

func TestRunReplacesAMismatchedPairLeftByACrash(t *testing.T) {
	// A crash between the key's write and the certificate's (Save writes
	// the key first) leaves the new key with the old certificate: that
	// pair is no pair, and a new one is asked for.
	f := newEnrollFixture(t, EnrollerConfig{})
	f.files.cert, _ = f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	_, f.files.key = f.ca.pair(t, "node-a", enrollT0.Add(-time.Hour), enrollT0.Add(29*24*time.Hour), nil)
	ctx, cancel := context.WithCancel(context.Background())
	f.clock.cancel, f.clock.stopAt = cancel, enrollT0.Add(time.Hour)
	f.e.Run(ctx)
	if len(f.api.asked) != 1 || f.files.saves != 1 {
		t.Fatalf("asked %d times, saved %d times; want the mismatched pair replaced", len(f.api.asked), f.files.saves)
	}
	f.leaf(t)
}
