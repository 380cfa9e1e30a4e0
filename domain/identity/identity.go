// Package identity holds the rules of a node's peer identity: the name a
// node's peer certificate carries, which certificate signing requests
// Ferry's signer grants, and when a certificate is renewed.
//
// Every node has its own certificate, signed by Ferry's peer CA through the
// Kubernetes certificates API: the daemon asks (its service account token
// names its node, and the API server copies that into the request), the
// signer in the controller grants a certificate naming exactly that node.
// A peer then knows which node it talks to: a promise is granted only to
// the node it names, and a node asked for a promise is the node dialled.
package identity

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Signer is the certificates API signer name of Ferry's peer CA.
const Signer = "ferry.zfs.csi.io/peer"

// ServerName is the DNS name every peer certificate carries besides its
// node's: the name peers verify, and the one a release before per-node
// identities verified.
const ServerName = "ferry-peer"

// uriPrefix leads the URI naming a node in its certificate (a SPIFFE-like
// ID: scheme, Ferry's trust domain, the node).
const uriPrefix = "spiffe://ferry.zfs.csi.io/node/"

// NodeNameExtra is the key under which the API server records, in a
// request made with a service account token bound to a pod, the node the
// pod runs on (Kubernetes 1.32 and later).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// URI is the URI a certificate names node by.
func URI(node string) string { return uriPrefix + node }

// NodeOf is the node a certificate's URIs name: exactly one URI of
// Ferry's form, naming a valid node, or none.
func NodeOf(uris []string) (string, bool) {
	var node string
	for _, u := range uris {
		n, ok := strings.CutPrefix(u, uriPrefix)
		if !ok {
			continue
		}
		if node != "" || !ValidNode(n) {
			return "", false
		}
		node = n
	}
	return node, node != ""
}

// ValidNode says whether n is a Kubernetes node name (a DNS subdomain).
func ValidNode(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' {
				return false
			}
		}
	}
	return true
}

// Request is a certificate signing request as the signer judges it: who
// made it (as the API server recorded) and what the certificate would say.
type Request struct {
	Username string
	Extra    map[string][]string
	// The request's subject and names.
	CommonName   string
	Organization []string
	DNSNames     []string
	URIs         []string
	IPs, Emails  int
	// Usages are the certificates API key usages asked for.
	Usages []string
}

// Usages a peer certificate is issued with: it serves and dials.
var Usages = []string{"digital signature", "key encipherment", "server auth", "client auth"}

// Verdict is the signer's answer: the node the certificate will name, or
// why the request is denied.
type Verdict struct {
	Approve bool
	Node    string
	Reason  string
}

// Decide judges a request made to Ferry's signer: granted only to account
// (Ferry's node daemon's service account, by its full user name) when its
// token names the node and the certificate would name exactly that node,
// as its common name and its one URI, with no name but ServerName beside
// and only Usages.
func Decide(r Request, account string) Verdict {
	deny := func(format string, a ...any) Verdict { return Verdict{Reason: fmt.Sprintf(format, a...)} }
	if r.Username != account {
		return deny("requested by %q, not by Ferry's node daemon (%s)", r.Username, account)
	}
	nodes := r.Extra[NodeNameExtra]
	if len(nodes) != 1 || !ValidNode(nodes[0]) {
		return deny("the requester's token names no node (%s: %q): a token bound to a pod on a node is needed (Kubernetes 1.32 or later)", NodeNameExtra, nodes)
	}
	node := nodes[0]
	if r.CommonName != node {
		return deny("common name %q is not the requester's node %q", r.CommonName, node)
	}
	if len(r.Organization) != 0 {
		return deny("organization %q asked for: a peer certificate names its node only", r.Organization)
	}
	if len(r.URIs) != 1 || r.URIs[0] != URI(node) {
		return deny("URIs %q: exactly %q expected", r.URIs, URI(node))
	}
	for _, d := range r.DNSNames {
		if d != ServerName {
			return deny("DNS name %q asked for: only %q", d, ServerName)
		}
	}
	if r.IPs != 0 || r.Emails != 0 {
		return deny("IP addresses or e-mail addresses asked for: a peer certificate names its node only")
	}
	for _, u := range r.Usages {
		if !slices.Contains(Usages, u) {
			return deny("usage %q asked for: only %q", u, Usages)
		}
	}
	if !slices.Contains(r.Usages, "server auth") || !slices.Contains(r.Usages, "client auth") {
		return deny("usages %q: a peer certificate serves and dials (server auth and client auth)", r.Usages)
	}
	return Verdict{Approve: true, Node: node, Reason: "the node daemon of " + node + " asked for its own name"}
}

// Lifetime is how long a certificate is issued for: as asked (the
// request's expiration, zero for none) within [min, max], and never past
// the CA's own expiry.
func Lifetime(asked, min, max time.Duration, now, caNotAfter time.Time) time.Duration {
	d := max
	if asked > 0 && asked < d {
		d = asked
	}
	if d < min {
		d = min
	}
	if left := caNotAfter.Sub(now); left < d {
		d = left
	}
	return d
}

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: two thirds into its life, so that a third of it is left for
// the API server or the signer to be away.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	return notBefore.Add(notAfter.Sub(notBefore) * 2 / 3)
}
