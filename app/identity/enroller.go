package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	ident "github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// Defaults of an Enroller's settings.
const (
	// DefaultEnrollLifetime is the lifetime asked for (the signer may
	// shorten it).
	DefaultEnrollLifetime = 30 * 24 * time.Hour
	// DefaultEnrollRetry is the first wait after a failed attempt; each
	// failure in a row doubles it, up to DefaultEnrollRetryMax.
	DefaultEnrollRetry    = 30 * time.Second
	DefaultEnrollRetryMax = 5 * time.Minute
	// DefaultEnrollWarnLeft is how little life left of the certificate in
	// use makes a failed renewal a warning of its own.
	DefaultEnrollWarnLeft = 24 * time.Hour
)

// enrollNap bounds every wait of Run: a timer does not count the time a
// node is suspended, nor follow the wall clock when it is set, so Run
// looks at the clock again at least this often.
const enrollNap = 5 * time.Minute

// EnrollerConfig is an Enroller's settings; durations left zero take the
// defaults above.
type EnrollerConfig struct {
	// Node is this node's name: the one its certificate names.
	Node string
	// Lifetime is the lifetime asked for.
	Lifetime time.Duration
	// Retry and RetryMax are the waits after failed attempts (doubled
	// with each failure in a row, from Retry up to RetryMax). Retry is
	// also the least time between two requests.
	Retry, RetryMax time.Duration
	// WarnLeft: a failed renewal while the certificate in use has less
	// than this left is a warning that it will expire.
	WarnLeft time.Duration
}

// Enroller keeps this node's peer certificate: it obtains one from
// Ferry's signer (ports.CertificateEnrollment) with a key of its own,
// keeps it where the node's other Ferry processes read it
// (ports.PeerIdentityFiles), and renews it when identity.RenewAt says,
// with a new key each time. A certificate is written only once checked:
// the key's, naming this node (identity.NodeOf), valid now, and, with
// WithEnrollerRoots, signed by a CA peers trust. The pair in place stays
// until a new one is written, so a renewal that fails (the API server or
// the signer away, or a certificate issued that peers would refuse) costs
// nothing until the certificate runs out; Run retries meanwhile and says
// how long is left.
type Enroller struct {
	cfg   EnrollerConfig
	ca    ports.CertificateEnrollment
	files ports.PeerIdentityFiles
	roots ports.PeerRoots
	now   func() time.Time
	log   *zap.Logger
	// sleep waits d, or until ctx ends (false then).
	sleep func(ctx context.Context, d time.Duration) bool

	busy     sync.Mutex // one request at a time (Ensure and Run)
	mu       sync.Mutex
	held     *enrolledCert // the certificate in place, as last checked or written; nil: none usable
	looked   bool          // the files were looked at (Ensure)
	failures int           // attempts failed in a row
	nextTry  time.Time     // no request before this
}

// enrolledCert is what the Enroller knows of a certificate it checked.
type enrolledCert struct {
	notBefore, notAfter time.Time
	serial              string
	leaf                *x509.Certificate
	// untrusted: not signed by the peer roots (WithEnrollerRoots) as last
	// read, so due for renewal at once, though still used until renewed
	// (the roots read may be the stale ones).
	untrusted bool
}

// renewAt is when the certificate is renewed: identity.RenewAt, or at
// once when it is untrusted.
func (c *enrolledCert) renewAt() time.Time {
	if c.untrusted {
		return c.notBefore
	}
	return ident.RenewAt(c.notBefore, c.notAfter)
}

// EnrollerOption adds an optional duty to an Enroller.
type EnrollerOption func(*Enroller)

// WithEnrollerRoots makes the Enroller check certificates against the CA
// certificates peers verify with, as roots reads them at each check:
//   - the pair it finds in place at start, and the pair in place again at
//     each of Run's wakings: a pair another CA signed (Ferry installed
//     anew, its CA made anew, the host directory kept), or one whose CA
//     the bundle no longer holds (a CA rotation finished), is renewed at
//     once rather than used until its renewal time. It stays in place, as
//     any pair does, until a new one is written;
//   - each certificate issued, before it is written: one peers would not
//     verify (the signer issuing from a CA not yet in the bundle) is not
//     written, and counts as a failed attempt.
//
// Roots that cannot be read change no judgement of a pair in place, and
// keep a certificate issued from being written (it cannot be checked).
func WithEnrollerRoots(roots ports.PeerRoots) EnrollerOption {
	return func(e *Enroller) { e.roots = roots }
}

// NewEnroller returns the Enroller of cfg.Node's certificate, asking ca
// and keeping the pair in files; now is the wall clock certificates are
// judged by.
func NewEnroller(cfg EnrollerConfig, ca ports.CertificateEnrollment, files ports.PeerIdentityFiles, now func() time.Time, log *zap.Logger, opts ...EnrollerOption) *Enroller {
	if cfg.Lifetime <= 0 {
		cfg.Lifetime = DefaultEnrollLifetime
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultEnrollRetry
	}
	if cfg.RetryMax < cfg.Retry {
		cfg.RetryMax = max(DefaultEnrollRetryMax, cfg.Retry)
	}
	if cfg.WarnLeft <= 0 {
		cfg.WarnLeft = DefaultEnrollWarnLeft
	}
	e := &Enroller{cfg: cfg, ca: ca, files: files, now: now, log: log.With(zap.String("node", cfg.Node)), sleep: enrollerSleep}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Ensure is the daemon's step at start: it returns nil once a pair good
// to use is in place. A pair already there that is good and not yet due
// for renewal is used without asking (a daemon restarted while the API
// server is away keeps its identity); otherwise a certificate is asked
// for, once (the request waits for the signer as long as ca does). A pair
// in place that is still good but due, when the request fails, is kept:
// Ensure returns nil and Run renews it. An error means no good pair is in
// place; the caller may go on without one, and Run keeps trying.
func (e *Enroller) Ensure(ctx context.Context) error {
	held := e.look()
	if held != nil && e.now().Before(held.renewAt()) {
		return nil
	}
	err := e.enroll(ctx)
	if err == nil {
		return nil
	}
	e.failed(err) // says so, and whether the pair in place stays in use
	if held != nil {
		return nil
	}
	return fmt.Errorf("no peer certificate for node %s: %w", e.cfg.Node, err)
}

// Run renews the certificate at identity.RenewAt until ctx ends: at once
// when no good pair is in place, or when the roots (WithEnrollerRoots),
// read again at each waking, no longer verify the pair in place; after a
// failure again after Retry, doubled with each failure in a row up to
// RetryMax.
func (e *Enroller) Run(ctx context.Context) {
	e.mu.Lock()
	looked := e.looked
	e.mu.Unlock()
	if !looked {
		e.look()
	}
	for ctx.Err() == nil {
		now := e.now()
		e.recheck(now)
		e.mu.Lock()
		held, next := e.held, e.nextTry
		e.mu.Unlock()
		due := now
		if held != nil {
			due = held.renewAt()
		}
		if next.After(due) {
			due = next
		}
		if now.Before(due) {
			if !e.sleep(ctx, min(due.Sub(now), enrollNap)) {
				return
			}
			continue
		}
		if err := e.enroll(ctx); err != nil && ctx.Err() == nil {
			e.failed(err)
		}
	}
}

// Current returns when the certificate in place (as last checked or
// written here) expires; false when no good pair was found in place nor
// written.
func (e *Enroller) Current() (notAfter time.Time, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.held == nil {
		return time.Time{}, false
	}
	return e.held.notAfter, true
}

// look judges the pair in place and remembers it when good.
func (e *Enroller) look() *enrolledCert {
	now := e.now()
	held, err := e.inPlace(now)
	e.mu.Lock()
	e.looked = true
	if held != nil {
		e.held = held
	}
	e.mu.Unlock()
	switch {
	case errors.Is(err, ports.ErrNotFound):
		e.log.Info("no peer certificate in place yet: asking Ferry's signer for one")
	case err != nil:
		e.log.Warn("the peer certificate in place is not used: asking Ferry's signer for a new one", zap.Error(err))
	case now.Before(held.renewAt()):
		e.log.Info("using the peer certificate in place", zap.String("serial", held.serial),
			zap.Time("notAfter", held.notAfter), zap.Time("renewAt", held.renewAt()))
	default:
		e.log.Info("the peer certificate in place is due for renewal", zap.String("serial", held.serial),
			zap.Time("notAfter", held.notAfter), zap.Time("renewAt", held.renewAt()))
	}
	return held
}

// inPlace returns the pair in place when it is good now; ErrNotFound
// when there is none.
func (e *Enroller) inPlace(now time.Time) (*enrolledCert, error) {
	certPEM, keyPEM, err := e.files.Load()
	if err != nil {
		return nil, err
	}
	c, leaf, err := e.check(certPEM, keyPEM, now)
	if err != nil {
		return nil, err
	}
	if e.roots != nil {
		switch err := enrollerTrusted(e.roots, leaf, now); {
		case errors.Is(err, errNoRoots):
			e.log.Warn("the peer certificate in place could not be checked against the peer CA peers verify with", zap.Error(err))
		case err != nil:
			e.log.Warn("the peer certificate in place is not signed by the peer CA peers verify with: renewing it now", zap.Error(err))
			c.untrusted = true
		}
	}
	return c, nil
}

// recheck judges the pair in place again against the roots as they are
// read now: when they no longer verify it (a CA rotation finished: the
// bundle dropped the CA that signed it), it is due for renewal at once;
// it stays in place until a trusted one is written. When they verify it
// again (the bundle was restored), it is due at its time again. A pair
// out of its validity is left alone: its time already says.
func (e *Enroller) recheck(now time.Time) {
	if e.roots == nil {
		return
	}
	e.mu.Lock()
	held := e.held
	e.mu.Unlock()
	if held == nil || held.leaf == nil || now.Before(held.notBefore) || !now.Before(held.notAfter) {
		return
	}
	err := enrollerTrusted(e.roots, held.leaf, now)
	if errors.Is(err, errNoRoots) {
		e.log.Debug("the peer certificate in place could not be checked against the peer CA again", zap.Error(err))
		return
	}
	untrusted := err != nil
	if untrusted == held.untrusted {
		return
	}
	c := *held
	c.untrusted = untrusted
	e.mu.Lock()
	if e.held != held { // renewed meanwhile
		e.mu.Unlock()
		return
	}
	e.held = &c
	e.mu.Unlock()
	if untrusted {
		e.log.Warn("the peer certificate in place is no longer signed by a CA peers verify with (the peer CA bundle dropped its CA?): renewing it now; it stays in use until a trusted one is in place",
			zap.String("serial", c.serial), zap.String("issuer", c.leaf.Issuer.String()), zap.Error(err))
	} else {
		e.log.Info("the peer certificate in place is signed by a CA peers verify with again: renewed at its time",
			zap.String("serial", c.serial), zap.Time("renewAt", c.renewAt()))
	}
}

// enroll asks for a certificate, checks it and puts it in place.
func (e *Enroller) enroll(ctx context.Context) error {
	e.busy.Lock()
	defer e.busy.Unlock()
	e.mu.Lock()
	prev := e.held
	e.mu.Unlock()
	certPEM, keyPEM, err := e.ca.Enroll(ctx, e.cfg.Node, e.cfg.Lifetime)
	if err != nil {
		return fmt.Errorf("ask for a peer certificate: %w", err)
	}
	now := e.now()
	c, leaf, err := e.check(certPEM, keyPEM, now)
	if err != nil {
		return fmt.Errorf("the peer certificate issued is not used: %w", err)
	}
	if e.roots != nil {
		if err := enrollerTrusted(e.roots, leaf, now); err != nil {
			return issuedUntrusted(leaf, err)
		}
	}
	if err := e.files.Save(certPEM, keyPEM); err != nil {
		return fmt.Errorf("put the peer certificate in place: %w", err)
	}
	e.mu.Lock()
	e.held, e.failures, e.nextTry = c, 0, now.Add(e.cfg.Retry)
	e.mu.Unlock()
	msg := "obtained a peer certificate"
	if prev != nil {
		msg = "renewed the peer certificate"
	}
	e.log.Info(msg, zap.String("serial", c.serial), zap.Time("notBefore", c.notBefore),
		zap.Time("notAfter", c.notAfter), zap.Time("renewAt", c.renewAt()))
	return nil
}

// failed records a failed attempt, sets the next, and says so.
func (e *Enroller) failed(err error) {
	now := e.now()
	e.mu.Lock()
	e.failures++
	n := e.failures
	wait := e.cfg.Retry
	for i := 1; i < n && wait < e.cfg.RetryMax; i++ {
		wait *= 2
	}
	wait = min(wait, e.cfg.RetryMax)
	e.nextTry = now.Add(wait)
	held := e.held
	e.mu.Unlock()

	fields := []zap.Field{zap.Int("failures", n), zap.Duration("retryIn", wait), zap.Error(err)}
	if held == nil {
		e.log.Warn("could not obtain a peer certificate", fields...)
		return
	}
	left := held.notAfter.Sub(now)
	fields = append(fields, zap.Time("notAfter", held.notAfter), zap.Duration("left", left))
	switch {
	case left <= 0:
		e.log.Error("could not renew the peer certificate, and it has expired: peers refuse this node until it is renewed", fields...)
	case left < e.cfg.WarnLeft:
		e.log.Warn("could not renew the peer certificate, and it expires soon: peers will refuse this node unless a renewal succeeds", fields...)
	default:
		e.log.Warn("could not renew the peer certificate; the one in place stays in use", fields...)
	}
}

// check says whether certPEM and keyPEM are a pair good to use now: the
// certificate is the key's, names this node (identity.NodeOf) and is
// valid at now.
func (e *Enroller) check(certPEM, keyPEM []byte, now time.Time) (*enrolledCert, *x509.Certificate, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("not a certificate and its key: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("an unreadable certificate: %w", err)
		}
	}
	uris := make([]string, len(leaf.URIs))
	for i, u := range leaf.URIs {
		uris[i] = u.String()
	}
	switch node, ok := ident.NodeOf(uris); {
	case !ok:
		return nil, nil, fmt.Errorf("the certificate names no node (URIs %q)", uris)
	case node != e.cfg.Node:
		return nil, nil, fmt.Errorf("the certificate names node %q, not this node %q", node, e.cfg.Node)
	}
	c := &enrolledCert{notBefore: leaf.NotBefore, notAfter: leaf.NotAfter, serial: leaf.SerialNumber.Text(16), leaf: leaf}
	if now.Before(c.notBefore) || !now.Before(c.notAfter) {
		return nil, nil, fmt.Errorf("the certificate is valid from %s to %s, not now (%s by this node's clock)",
			c.notBefore.Format(time.RFC3339), c.notAfter.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	return c, leaf, nil
}

// errNoRoots: the CA certificates peers verify with could not be read,
// so no certificate can be judged by them.
var errNoRoots = errors.New("no peer CA to check against")

// enrollerTrusted checks leaf against the CA certificates of roots; an
// error wrapping errNoRoots when they cannot be read.
func enrollerTrusted(roots ports.PeerRoots, leaf *x509.Certificate, now time.Time) error {
	b, err := roots.Roots()
	if err != nil {
		return fmt.Errorf("%w: the peer CA cannot be read: %w", errNoRoots, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("%w: the peer CA file holds no PEM certificate", errNoRoots)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return err
	}
	return nil
}

// issuedUntrusted is why a certificate issued that the roots do not verify
// (err, from enrollerTrusted) is not written.
func issuedUntrusted(leaf *x509.Certificate, err error) error {
	if errors.Is(err, errNoRoots) {
		return fmt.Errorf("the peer certificate issued is not used: it cannot be checked against the CA certificates peers verify with: %w", err)
	}
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		return fmt.Errorf("the peer certificate issued is not used: peers would refuse it, as the signer's CA (issuer %q) is not in the peer CA bundle they trust (during a CA rotation, add the new CA to the bundle before the signer issues from it): %w",
			leaf.Issuer.String(), err)
	}
	return fmt.Errorf("the peer certificate issued is not used: peers would refuse it, as it does not verify against the peer CA bundle they trust (issuer %q): %w",
		leaf.Issuer.String(), err)
}

func enrollerSleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
