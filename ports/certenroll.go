package ports

import (
	"context"
	"time"
)

// CertificateEnrollment obtains this node's peer certificate from Ferry's
// signer (Kubernetes: a CertificateSigningRequest to identity.Signer, made
// with the node daemon's service account, whose token names its node).
type CertificateEnrollment interface {
	// Enroll asks for a certificate naming node (its common name and its
	// one URI, identity.URI; identity.ServerName beside) for a key made for
	// this request alone, valid for lifetime (the signer may shorten it),
	// and waits until it is issued. It returns the certificate as issued
	// (PEM, the node's own first) and the key (PEM), the certificate
	// checked to be the key's. An error when the request could not be
	// made, was denied or failed (the signer's reason in the message), or
	// was not answered before the implementation's timeout or ctx; the
	// request is given up then (its key dropped; Kubernetes: the request
	// left to the API server's cleaner, never deleted by the node), and a
	// later call asks anew.
	Enroll(ctx context.Context, node string, lifetime time.Duration) (certPEM, keyPEM []byte, err error)
}

// PeerIdentityFiles keep this node's peer certificate and its key where
// the node's other Ferry processes read them (Kubernetes: a directory on
// the host).
type PeerIdentityFiles interface {
	// Load returns the pair kept, as written; ErrNotFound when either file
	// is missing. It does not check that the two match: after a crash
	// within Save they may not (the new key, the old certificate), and
	// the caller is to judge the pair (app/identity's Enroller finds it
	// no pair and asks for a new one).
	Load() (certPEM, keyPEM []byte, err error)
	// Save replaces the pair, each file at once: a reader sees a file
	// whole, the old one or the new one. The key is replaced first, so a
	// reader may meet the new key with the old certificate for a moment
	// (and should keep the pair it had until the two match).
	Save(certPEM, keyPEM []byte) error
}

// PeerRoots are the CA certificates peers verify a node's certificate
// with (Kubernetes: the ca.crt of Ferry's peer Secret, mounted).
type PeerRoots interface {
	// Roots returns the CA certificates (PEM) as they are now.
	Roots() ([]byte, error)
}
