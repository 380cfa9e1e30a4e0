package identity

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	ident "github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// NodeAccount is the user name of Ferry's node daemon's service account
// in namespace: the only requester Ferry's signer grants a certificate.
func NodeAccount(namespace string) string {
	return "system:serviceaccount:" + namespace + ":ferry-node"
}

// Lifetimes of the certificates the signer issues: at least an hour (a
// shorter one would be renewed all the time), at most
// DefaultSignerMaxLifetime unless SignerConfig says otherwise.
const (
	SignerMinLifetime        = time.Hour
	DefaultSignerMaxLifetime = 30 * 24 * time.Hour
	// DefaultSignerResync is how often the signer looks at every request
	// again without being told of a change: a retry after errors, and
	// the fallback should a notification be lost.
	DefaultSignerResync = 30 * time.Second
)

// SignerConfig is the signer's settings.
type SignerConfig struct {
	// Namespace is Ferry's namespace, whose ferry-node service account
	// alone is granted certificates (NodeAccount).
	Namespace string
	// MaxLifetime bounds the lifetime of the certificates issued
	// (DefaultSignerMaxLifetime when zero); a request may ask for less,
	// never for less than SignerMinLifetime.
	MaxLifetime time.Duration
	// Resync is how often every request is looked at again
	// (DefaultSignerResync when zero).
	Resync time.Duration
}

// Signer is Ferry's peer signer, run where the peer CA's key is (and
// nowhere else): it answers the requests made to Ferry's signer
// (identity.Signer) as identity.Decide judges them. A request Decide
// grants is approved and issued a certificate by the peer CA; one it
// refuses is denied, or, when someone else approved it already (an
// administrator's kubectl certificate approve), marked failed: nothing
// Decide refuses is ever signed, whoever approved it. Requests denied,
// failed or issued already are left alone.
//
// Every answer is a write of the request as read, so the signer is
// idempotent and any number of them may run at once: the one that loses
// a race reads the request again and finds it answered.
type Signer struct {
	cfg      SignerConfig
	account  string
	requests ports.SigningRequests
	ca       ports.PeerCA
	log      *zap.Logger
	// now is the clock the lifetimes are measured from.
	now func() time.Time
}

// NewSigner returns the signer of requests, issuing with ca.
func NewSigner(cfg SignerConfig, requests ports.SigningRequests, ca ports.PeerCA, log *zap.Logger) *Signer {
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = DefaultSignerMaxLifetime
	}
	if cfg.MaxLifetime < SignerMinLifetime {
		cfg.MaxLifetime = SignerMinLifetime
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultSignerResync
	}
	return &Signer{cfg: cfg, account: NodeAccount(cfg.Namespace), requests: requests, ca: ca, log: log, now: time.Now}
}

// Run answers the requests as they come (a pass on every change of a
// request, and every Resync) until ctx ends.
func (s *Signer) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Resync)
	defer t.Stop()
	for {
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("certificate signing requests not all answered (retried on the next change or resync)", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.requests.Changes():
		case <-t.C:
		}
	}
}

// Sync answers every request waiting for an answer once. A request that
// changed meanwhile is no error: the change brings the next pass.
func (s *Signer) Sync(ctx context.Context) error {
	list, err := s.requests.List(ctx)
	if err != nil {
		return fmt.Errorf("list the requests to Ferry's signer: %w", err)
	}
	var errs []error
	for _, r := range list {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch err := s.answer(ctx, r); {
		case errors.Is(err, ports.ErrConflict):
			s.log.Debug("a certificate signing request changed while answered: judged again on the next pass", zap.String("request", r.Name), zap.Error(err))
		case err != nil:
			errs = append(errs, fmt.Errorf("request %s: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// answer judges one request and carries the verdict out.
func (s *Signer) answer(ctx context.Context, r ports.SigningRequest) error {
	if r.Denied || r.Failed || r.Issued {
		return nil
	}
	v := s.judge(r)
	reason := signerClip(v.Reason)
	// The node the requester's token names: the node a denial is about.
	log := s.log.With(zap.String("request", r.Name), zap.String("requester", signerClip(r.Username)),
		zap.Strings("requesterNode", r.Extra[ident.NodeNameExtra]), zap.String("reason", reason))
	if !v.Approve {
		if r.Approved {
			// Approved by someone else (this signer approves only what
			// Decide grants, and Decide judges alike every time): never
			// signed, whoever approved it.
			if err := s.requests.Fail(ctx, r, "approved, but Ferry's peer signer does not sign it: "+reason); err != nil {
				return fmt.Errorf("mark it failed: %w", err)
			}
			log.Warn("refused to sign a certificate signing request approved by someone else")
			return nil
		}
		if err := s.requests.Deny(ctx, r, reason); err != nil {
			return fmt.Errorf("deny it: %w", err)
		}
		log.Info("denied a certificate signing request")
		return nil
	}
	log = log.With(zap.String("node", v.Node))
	if !r.Approved {
		approved, err := s.requests.Approve(ctx, r, reason)
		if err != nil {
			return fmt.Errorf("approve it: %w", err)
		}
		log.Info("approved a certificate signing request")
		r = approved
	}
	return s.issue(ctx, r, log)
}

// issue signs an approved request that Decide grants and writes its
// certificate.
func (s *Signer) issue(ctx context.Context, r ports.SigningRequest, log *zap.Logger) error {
	caNotAfter, err := s.ca.NotAfter(ctx)
	if err != nil {
		return fmt.Errorf("read the peer CA: %w", err)
	}
	now := s.now()
	life := ident.Lifetime(r.Expiration, SignerMinLifetime, s.cfg.MaxLifetime, now, caNotAfter)
	if life <= 0 {
		return fmt.Errorf("the peer CA expired at %s: no certificate is issued until it is renewed", caNotAfter.UTC().Format(time.RFC3339))
	}
	cert, err := s.ca.Sign(ctx, r.CSR, life)
	if errors.Is(err, ports.ErrInvalid) {
		reason := signerClip("the peer CA cannot sign it: " + err.Error())
		if err := s.requests.Fail(ctx, r, reason); err != nil {
			return fmt.Errorf("mark it failed (%s): %w", reason, err)
		}
		log.Warn("a certificate signing request failed", zap.String("why", reason))
		return nil
	}
	if err != nil {
		return fmt.Errorf("sign it: %w", err)
	}
	if err := s.requests.Issue(ctx, r, cert); err != nil {
		return fmt.Errorf("write its certificate: %w", err)
	}
	log.Info("issued a peer certificate", zap.Duration("lifetime", life), zap.Time("expires", now.Add(life)))
	return nil
}

// judge is Decide's verdict on r; a request whose CSR cannot be read, or
// is not signed by the key it names, is refused.
func (s *Signer) judge(r ports.SigningRequest) ident.Verdict {
	req, err := signerRequestOf(r)
	if err != nil {
		return ident.Verdict{Reason: err.Error()}
	}
	return ident.Decide(req, s.account)
}

// signerRequestOf is r as identity.Decide judges it: who asked (as the
// API server recorded) and what the certificate would say (as the CSR
// asks).
func signerRequestOf(r ports.SigningRequest) (ident.Request, error) {
	block, _ := pem.Decode(r.CSR)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return ident.Request{}, errors.New("the request holds no PEM block CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return ident.Request{}, fmt.Errorf("the certificate request cannot be read: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return ident.Request{}, fmt.Errorf("the certificate request is not signed by the key it names: %v", err)
	}
	uris := make([]string, len(csr.URIs))
	for i, u := range csr.URIs {
		uris[i] = u.String()
	}
	return ident.Request{
		Username:     r.Username,
		Extra:        r.Extra,
		CommonName:   csr.Subject.CommonName,
		Organization: csr.Subject.Organization,
		DNSNames:     csr.DNSNames,
		URIs:         uris,
		IPs:          len(csr.IPAddresses),
		Emails:       len(csr.EmailAddresses),
		Usages:       r.Usages,
	}, nil
}

// signerMaxReason bounds a reason written to a request or logged: a
// verdict quotes what the requester sent, and a hostile request must not
// flood the logs or the object.
const signerMaxReason = 1024

func signerClip(s string) string {
	if len(s) <= signerMaxReason {
		return s
	}
	cut := signerMaxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "... (cut)"
}
