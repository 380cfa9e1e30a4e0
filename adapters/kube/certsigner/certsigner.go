// Package certsigner is ports.SigningRequests on the Kubernetes
// certificates API (certificates.k8s.io/v1): the CertificateSigningRequests
// whose spec.signerName is Ferry's signer (identity.Signer), from an
// informer narrowed to them by a field selector; approved and denied
// through the approval subresource, issued and failed through the status
// subresource, each write guarded by the request's resourceVersion.
//
// The signer's ServiceAccount needs: certificatesigningrequests get,
// list, watch; certificatesigningrequests/approval and /status update;
// and approve and sign on signers, resourceName ferry.zfs.csi.io/peer
// (deploy/signer.yaml; tests/kubeapi checks them on an API server that
// authorizes by RBAC).
package certsigner

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-csi/ferry/domain/identity"
	"github.com/ferry-csi/ferry/ports"
)

// Reason is the reason of the conditions Ferry's signer sets (its
// message says why).
const Reason = "FerryPeerSigner"

// Requests watches the requests made to Ferry's signer and writes the
// signer's answers.
type Requests struct {
	kube    kubernetes.Interface
	lister  certlisters.CertificateSigningRequestLister
	changes chan struct{}
	now     func() time.Time
}

var _ ports.SigningRequests = (*Requests)(nil)

// Start runs the informer until ctx ends and returns once its cache is
// filled.
func Start(ctx context.Context, kube kubernetes.Interface) (*Requests, error) {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", identity.Signer).String()
	}))
	inf := f.Certificates().V1().CertificateSigningRequests()
	r := &Requests{kube: kube, lister: inf.Lister(), changes: make(chan struct{}, 1), now: time.Now}
	notify := func() {
		select {
		case r.changes <- struct{}{}:
		default:
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
	}); err != nil {
		return nil, fmt.Errorf("watch the certificate signing requests of %s: %w", identity.Signer, err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("the cache of %v (signer %s) did not fill", typ, identity.Signer)
		}
	}
	return r, nil
}

// Changes is notified when a request is made or changes.
func (r *Requests) Changes() <-chan struct{} { return r.changes }

// List returns the requests of Ferry's signer in the cache (the field
// selector narrows the watch; the signer's name is checked again here).
func (r *Requests) List(context.Context) ([]ports.SigningRequest, error) {
	all, err := r.lister.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list the certificate signing requests of %s: %w", identity.Signer, err)
	}
	out := make([]ports.SigningRequest, 0, len(all))
	for _, c := range all {
		if c.Spec.SignerName != identity.Signer {
			continue
		}
		out = append(out, toPort(c))
	}
	return out, nil
}

// toPort translates a CertificateSigningRequest.
func toPort(c *certificatesv1.CertificateSigningRequest) ports.SigningRequest {
	out := ports.SigningRequest{
		Name:     c.Name,
		Version:  c.ResourceVersion,
		CSR:      c.Spec.Request,
		Username: c.Spec.Username,
		Issued:   len(c.Status.Certificate) > 0,
	}
	if len(c.Spec.Extra) > 0 {
		out.Extra = make(map[string][]string, len(c.Spec.Extra))
		for k, v := range c.Spec.Extra {
			out.Extra[k] = append([]string(nil), v...)
		}
	}
	for _, u := range c.Spec.Usages {
		out.Usages = append(out.Usages, string(u))
	}
	if c.Spec.ExpirationSeconds != nil && *c.Spec.ExpirationSeconds > 0 {
		out.Expiration = time.Duration(*c.Spec.ExpirationSeconds) * time.Second
	}
	for _, cond := range c.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case certificatesv1.CertificateApproved:
			out.Approved = true
		case certificatesv1.CertificateDenied:
			out.Denied = true
		case certificatesv1.CertificateFailed:
			out.Failed = true
		}
	}
	return out
}

// current reads request p afresh: it must still be the one judged (same
// resourceVersion, Ferry's signer), else ErrConflict.
func (r *Requests) current(ctx context.Context, p ports.SigningRequest) (*certificatesv1.CertificateSigningRequest, error) {
	c, err := r.kube.CertificatesV1().CertificateSigningRequests().Get(ctx, p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("certificate signing request %s is gone: %w", p.Name, ports.ErrConflict)
	case err != nil:
		return nil, fmt.Errorf("read certificate signing request %s: %w", p.Name, err)
	case c.ResourceVersion != p.Version:
		return nil, fmt.Errorf("certificate signing request %s changed since it was read (version %s, now %s): %w", p.Name, p.Version, c.ResourceVersion, ports.ErrConflict)
	case c.Spec.SignerName != identity.Signer:
		return nil, fmt.Errorf("certificate signing request %s is for signer %q, not %s: %w", p.Name, c.Spec.SignerName, identity.Signer, ports.ErrConflict)
	}
	return c, nil
}

// condition adds a condition of type typ, for message.
func (r *Requests) condition(c *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, message string) {
	now := metav1.NewTime(r.now())
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: Reason, Message: message,
		LastUpdateTime: now, LastTransitionTime: now,
	})
}

// writeErr is the error of a write: ErrConflict when the request changed
// or went away meanwhile.
func writeErr(what, name string, err error) error {
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return fmt.Errorf("%s certificate signing request %s: it changed meanwhile: %w", what, name, ports.ErrConflict)
	}
	return fmt.Errorf("%s certificate signing request %s: %w", what, name, err)
}

// Approve adds the condition Approved through the approval subresource.
func (r *Requests) Approve(ctx context.Context, p ports.SigningRequest, reason string) (ports.SigningRequest, error) {
	c, err := r.current(ctx, p)
	if err != nil {
		return ports.SigningRequest{}, err
	}
	r.condition(c, certificatesv1.CertificateApproved, reason)
	out, err := r.kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{})
	if err != nil {
		return ports.SigningRequest{}, writeErr("approve", p.Name, err)
	}
	return toPort(out), nil
}

// Deny adds the condition Denied through the approval subresource.
func (r *Requests) Deny(ctx context.Context, p ports.SigningRequest, reason string) error {
	c, err := r.current(ctx, p)
	if err != nil {
		return err
	}
	r.condition(c, certificatesv1.CertificateDenied, reason)
	if _, err := r.kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{}); err != nil {
		return writeErr("deny", p.Name, err)
	}
	return nil
}

// Fail adds the condition Failed through the status subresource.
func (r *Requests) Fail(ctx context.Context, p ports.SigningRequest, reason string) error {
	c, err := r.current(ctx, p)
	if err != nil {
		return err
	}
	r.condition(c, certificatesv1.CertificateFailed, reason)
	if _, err := r.kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return writeErr("mark failed", p.Name, err)
	}
	return nil
}

// Issue writes status.certificate through the status subresource.
func (r *Requests) Issue(ctx context.Context, p ports.SigningRequest, certificate []byte) error {
	c, err := r.current(ctx, p)
	if err != nil {
		return err
	}
	if len(c.Status.Certificate) > 0 {
		return fmt.Errorf("certificate signing request %s was issued meanwhile: %w", p.Name, ports.ErrConflict)
	}
	c.Status.Certificate = certificate
	if _, err := r.kube.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return writeErr("issue", p.Name, err)
	}
	return nil
}
