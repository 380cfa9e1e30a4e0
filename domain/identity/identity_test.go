package identity_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/identity"
)

const account = "system:serviceaccount:ferry-system:ferry-node"

func good() identity.Request {
	return identity.Request{
		Username:   account,
		Extra:      map[string][]string{identity.NodeNameExtra: {"node-a"}},
		CommonName: "node-a",
		DNSNames:   []string{identity.ServerName},
		URIs:       []string{identity.URI("node-a")},
		Usages:     []string{"digital signature", "server auth", "client auth"},
	}
}

// The signer grants a certificate only to Ferry's node daemon, for the
// node its token names, naming that node and nothing else; each rule's
// case below is refused with a reason, and the good request granted.
func TestTheSignerGrantsANodeItsOwnNameOnly(t *testing.T) {
	if v := identity.Decide(good(), account); !v.Approve || v.Node != "node-a" {
		t.Fatalf("a node daemon asking for its own name: %+v", v)
	}
	cases := map[string]func(r *identity.Request){
		"another account":            func(r *identity.Request) { r.Username = "system:serviceaccount:ferry-system:ferry-replica" },
		"the account of another ns":  func(r *identity.Request) { r.Username = "system:serviceaccount:other:ferry-node" },
		"a token naming no node":     func(r *identity.Request) { delete(r.Extra, identity.NodeNameExtra) },
		"a token naming two nodes":   func(r *identity.Request) { r.Extra[identity.NodeNameExtra] = []string{"node-a", "node-b"} },
		"another node's name":        func(r *identity.Request) { r.CommonName = "node-b"; r.URIs = []string{identity.URI("node-b")} },
		"another node's URI":         func(r *identity.Request) { r.URIs = []string{identity.URI("node-b")} },
		"a second URI":               func(r *identity.Request) { r.URIs = append(r.URIs, identity.URI("node-b")) },
		"no URI":                     func(r *identity.Request) { r.URIs = nil },
		"an organization":            func(r *identity.Request) { r.Organization = []string{"system:masters"} },
		"a DNS name of its choosing": func(r *identity.Request) { r.DNSNames = append(r.DNSNames, "kubernetes.default.svc") },
		"an IP address":              func(r *identity.Request) { r.IPs = 1 },
		"an e-mail address":          func(r *identity.Request) { r.Emails = 1 },
		"a CA's usage":               func(r *identity.Request) { r.Usages = append(r.Usages, "cert sign") },
		"no client use":              func(r *identity.Request) { r.Usages = []string{"server auth"} },
		"no server use":              func(r *identity.Request) { r.Usages = []string{"client auth"} },
		"a node name that is a path": func(r *identity.Request) {
			r.Extra[identity.NodeNameExtra] = []string{"../x"}
			r.CommonName, r.URIs = "../x", []string{identity.URI("../x")}
		},
	}
	for name, edit := range cases {
		r := good()
		r.Extra = map[string][]string{identity.NodeNameExtra: {"node-a"}}
		edit(&r)
		if v := identity.Decide(r, account); v.Approve || v.Reason == "" {
			t.Errorf("%s: %+v, want denied with a reason", name, v)
		}
	}
}

func TestACertificateNamesItsNodeByExactlyOneURI(t *testing.T) {
	if n, ok := identity.NodeOf([]string{"https://example.com", identity.URI("node-a")}); !ok || n != "node-a" {
		t.Fatalf("NodeOf: %q %v", n, ok)
	}
	for _, uris := range [][]string{nil, {identity.URI("node-a"), identity.URI("node-b")}, {identity.URI("Node_A")}, {identity.URI("")}, {"spiffe://other/node/node-a"}} {
		if n, ok := identity.NodeOf(uris); ok {
			t.Errorf("NodeOf(%q) = %q, want none", uris, n)
		}
	}
	if identity.ValidNode(strings.Repeat("a", 64)) || !identity.ValidNode("node-1.example.com") {
		t.Error("ValidNode: a 64-character label taken, or a dotted name refused")
	}
}

func TestALifetimeIsAsAskedWithinBoundsAndNeverPastTheCA(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	far := now.Add(365 * 24 * time.Hour)
	for _, c := range []struct {
		asked, want time.Duration
		ca          time.Time
	}{
		{0, 30 * 24 * time.Hour, far},
		{48 * time.Hour, 48 * time.Hour, far},
		{time.Minute, time.Hour, far},
		{90 * 24 * time.Hour, 30 * 24 * time.Hour, far},
		{48 * time.Hour, 10 * time.Hour, now.Add(10 * time.Hour)},
	} {
		if got := identity.Lifetime(c.asked, time.Hour, 30*24*time.Hour, now, c.ca); got != c.want {
			t.Errorf("Lifetime(%s, CA until %s) = %s, want %s", c.asked, c.ca, got, c.want)
		}
	}
	if at := identity.RenewAt(now, now.Add(30*time.Hour)); !at.Equal(now.Add(20 * time.Hour)) {
		t.Errorf("RenewAt: %s", at)
	}
}
