package peerdir

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ferry-csi/ferry/domain/replica"

	"github.com/ferry-csi/ferry/ports"
)

func TestAPublishedAddressIsResolvedAndRenewed(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	p := NewPublisher(client, "ferry-system", "node-a", "10.1.0.5:7443")
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(client, "ferry-system", 0)
	if addr, err := r.Resolve("node-a"); err != nil || addr != "10.1.0.5:7443" {
		t.Fatalf("Resolve = %q, %v", addr, err)
	}
	// A restarted daemon with a new address renews the same Lease.
	p2 := NewPublisher(client, "ferry-system", "node-a", "10.1.0.9:7443")
	if err := p2.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if addr, err := r.Resolve("node-a"); err != nil || addr != "10.1.0.9:7443" {
		t.Fatalf("after a new address: %q, %v", addr, err)
	}
	if _, err := r.Resolve("node-b"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a node without a lease: %v, want ErrUnavailable", err)
	}
}

func TestTheCacheServesWithinItsTTL(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if err := NewPublisher(client, "ns", "a", "1.1.1.1:1").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(client, "ns", time.Hour)
	if _, err := r.Resolve("a"); err != nil {
		t.Fatal(err)
	}
	before := len(client.Actions())
	for range 5 {
		if _, err := r.Resolve("a"); err != nil {
			t.Fatal(err)
		}
	}
	if len(client.Actions()) != before {
		t.Fatalf("%d reads within the TTL, want none", len(client.Actions())-before)
	}
}

func TestLeaseNamesAreValidForLongNodeNames(t *testing.T) {
	long := strings.Repeat("n", 250)
	if n := LeaseName("node-a"); n != "ferry-node-node-a" {
		t.Errorf("LeaseName(node-a) = %q", n)
	}
	if n := LeaseName(replica.Node("x" + long)); len(n) > 253 || !strings.HasPrefix(n, "ferry-node-") {
		t.Errorf("LeaseName(long) = %q", n)
	}
}

// Issue 21.8: while the API server cannot be read, a node's address is
// the one its lease last published (copies keep fetching from the
// primary during an outage); a node never resolved still answers
// ErrUnavailable.
func TestTheLastAddressServesWhileTheLeaseCannotBeRead(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if err := NewPublisher(client, "ns", "a", "1.1.1.1:1").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(client, "ns", 0) // every call reads
	if _, err := r.Resolve("a"); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server is away")
	})
	if addr, err := r.Resolve("a"); err != nil || addr != "1.1.1.1:1" {
		t.Fatalf("during an outage: %q, %v; want the last address", addr, err)
	}
	if _, err := r.Resolve("b"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("a node never resolved during an outage: %v, want ErrUnavailable", err)
	}
}

// A lease deleted names no address: the cached one is not served for it
// (its address may be another node's by now).
func TestADeletedLeaseIsNotResolvedFromTheCache(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	if err := NewPublisher(client, "ns", "a", "1.1.1.1:1").Publish(ctx); err != nil {
		t.Fatal(err)
	}
	r := NewResolver(client, "ns", 0)
	if _, err := r.Resolve("a"); err != nil {
		t.Fatal(err)
	}
	if err := client.CoordinationV1().Leases("ns").Delete(ctx, LeaseName("a"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if addr, err := r.Resolve("a"); !errors.Is(err, ports.ErrUnavailable) {
		t.Fatalf("after the lease's deletion: %q, %v; want ErrUnavailable", addr, err)
	}
}

// A node's lease says how long it holds it, in whole seconds rounded up
// (never less than it holds), and the reader passes it on: the other
// nodes wait at least that long before they take it for lost.
func TestALeaseSaysItsDurationRoundedUp(t *testing.T) {
	client := fake.NewClientset()
	ctx := context.Background()
	p := NewPublisher(client, "ferry-system", "node-a", "10.1.0.5:7443")
	p.Duration = 2500 * time.Millisecond
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := NewLeases(client, "ferry-system").Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := recs["node-a"].Duration; got != 3*time.Second {
		t.Fatalf("a lease held 2.5 s reads as held %s, want 3s", got)
	}
}

// renewedBy is node-a's daemon at addr, holding its lease for d, after
// its first renewal (margin: NewPublisher's).
func renewedBy(t *testing.T, client *fake.Clientset, addr string, d time.Duration) *Publisher {
	t.Helper()
	p := NewPublisher(client, "ferry-system", "node-a", addr)
	p.Duration = d
	if err := p.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// A publisher remembers the terms its node's Lease declared before it
// first renewed it: those of the daemon it replaced, not its own.
func TestAPublisherRemembersItsPredecessorsLeaseDuration(t *testing.T) {
	client := fake.NewClientset()
	if got := renewedBy(t, client, "10.1.0.5:7443", 5*time.Second).Predecessor(); got != 0 {
		t.Fatalf("a Lease created afresh had a predecessor of %s", got)
	}
	next := renewedBy(t, client, "10.1.0.6:7443", 3*time.Second)
	for range 2 {
		if err := next.Renew(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := next.Predecessor(); got != 5*time.Second {
		t.Fatalf("Predecessor = %s after renewals, want the 5s the Lease said before", got)
	}
}

// A daemon that replaced one with longer terms declares them in the
// Lease from its first write on, until they surely ended: a daemon that
// replaces it in turn (a crash right after the update) still finds them.
func TestADaemonDeclaresItsPredecessorsLongerTermsUntilTheyEnded(t *testing.T) {
	client := fake.NewClientset()
	renewedBy(t, client, "10.1.0.5:7443", 5*time.Second)
	renewedBy(t, client, "10.1.0.6:7443", 3*time.Second)
	recs, err := NewLeases(client, "ferry-system").Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := recs["node-a"].Duration; got != 5*time.Second {
		t.Fatalf("right after the update the Lease declares %s, want the predecessor's 5s", got)
	}
	if got := renewedBy(t, client, "10.1.0.7:7443", 3*time.Second).Predecessor(); got != 5*time.Second {
		t.Fatalf("a second replacement finds %s, want the first daemon's 5s", got)
	}
}
