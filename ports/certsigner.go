package ports

import (
	"context"
	"time"
)

// SigningRequest is a request for a peer certificate made to Ferry's
// signer (Kubernetes: a CertificateSigningRequest whose spec.signerName
// is identity.Signer), as read.
type SigningRequest struct {
	// Name identifies the request. Version is the request as read
	// (Kubernetes: its resourceVersion): a write is refused with
	// ErrConflict when the request changed since.
	Name, Version string
	// CSR is the PKCS#10 request, PEM-encoded, as its requester sent it.
	CSR []byte
	// Username and Extra are who made the request, as the API server
	// recorded them (the requester cannot choose them).
	Username string
	Extra    map[string][]string
	// Usages are the key usages asked for (the certificates API's names:
	// "digital signature", "server auth", ...).
	Usages []string
	// Expiration is the lifetime asked for; zero when none was.
	Expiration time.Duration
	// The request's standing: approved, denied or failed (by anyone),
	// and whether a certificate was issued already.
	Approved, Denied, Failed, Issued bool
}

// SigningRequests are the requests made to Ferry's signer, and the
// signer's answers to them. Every write applies to the request as read
// (its Version) and returns ErrConflict when the request changed or went
// away meanwhile: the signer reads it again and judges anew.
type SigningRequests interface {
	// List returns the requests made to Ferry's signer, from a watched
	// cache: it may lag, since every write checks the Version again.
	List(ctx context.Context) ([]SigningRequest, error)
	// Changes receives a value (coalesced) after a request may have been
	// made or changed.
	Changes() <-chan struct{}
	// Approve marks r approved, for reason; it returns r as it now
	// stands, to issue its certificate without reading it again.
	Approve(ctx context.Context, r SigningRequest, reason string) (SigningRequest, error)
	// Deny marks r denied, for reason: it is never issued.
	Deny(ctx context.Context, r SigningRequest, reason string) error
	// Fail marks an approved r failed, for reason: it is never issued.
	Fail(ctx context.Context, r SigningRequest, reason string) error
	// Issue gives r its certificate (PEM).
	Issue(ctx context.Context, r SigningRequest, certificate []byte) error
}

// PeerCA is Ferry's peer certificate authority (a CA certificate and its
// key, such as the Secret ferry-peer-ca mounted as files; a rotated CA is
// used from the next call).
type PeerCA interface {
	// NotAfter is when the CA's own certificate expires: no certificate
	// it issues outlives it.
	NotAfter(ctx context.Context) (time.Time, error)
	// Sign issues a certificate for csr (a PKCS#10 request, PEM) valid
	// from now for lifetime (never past the CA's own expiry), naming
	// exactly the request's common name, DNS names and URIs, for server
	// and client use; it returns the certificate, PEM. ErrInvalid only
	// when csr itself can never be signed (unreadable, a wrong
	// signature, a key too weak or of an unknown kind); any other error
	// (the CA unreadable, not a CA, its key not the certificate's, the
	// CA expired) may go away with the CA's next rotation.
	Sign(ctx context.Context, csr []byte, lifetime time.Duration) ([]byte, error)
}
