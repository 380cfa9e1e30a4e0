// Package peerdir publishes and finds each node's peer address: the
// address where the node's daemon serves its pool's snapshots to the
// other nodes (adapters/peer). Each daemon holds a coordination Lease
// named after its node in Ferry's namespace, with the address in an
// annotation; volume managers resolve a node's address from it
// (Resolver). The Lease is also the node's liveness: Publisher is
// ports.NodeLease (the failover Guard renews it), Leases is
// ports.NodeLeases (the Survivors read every node's).
package peerdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

const (
	// AnnotationPeerAddress holds host:port of the node's peer service.
	AnnotationPeerAddress = "ferry.zfs.csi.io/peer-address"
	// LabelComponent marks Ferry's node leases.
	LabelComponent = "app.kubernetes.io/component"
	componentValue = "node-lease"
)

// LeaseName is the Lease of node: "ferry-node-<node>", or a hash of the
// node name when that would be too long for an object name.
func LeaseName(node replica.Node) string {
	n := "ferry-node-" + string(node)
	if len(validation.IsDNS1123Subdomain(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(node))
	return "ferry-node-" + hex.EncodeToString(sum[:16])
}

// Publisher keeps this node's Lease: its liveness (ports.NodeLease) and
// its peer address.
type Publisher struct {
	client    kubernetes.Interface
	namespace string
	node      replica.Node
	address   string
	// Duration is the Lease's duration; renewals come every third of it
	// (Run), or as the caller of Renew decides.
	Duration time.Duration
	// Margin is the lease's margin (liveness.Config.Margin): with
	// Duration, what the Lease declares (liveness.Config.Declared).
	Margin time.Duration

	mu   sync.Mutex
	last *coordinationv1.Lease // as the last renewal left it: the next is one write
	// predecessor is the duration the Lease declared when this publisher
	// first wrote it (the daemon before it on the node; 0: none).
	predecessor time.Duration
	wrote       bool
	firstWrite  time.Time
}

// Predecessor is the lease duration the node's Lease declared before this
// publisher first renewed it: the terms the daemon it replaced ran on (0:
// no Lease, none declared, or not renewed yet).
func (p *Publisher) Predecessor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.predecessor
}

var _ ports.NodeLease = (*Publisher)(nil)

// Renew renews the Lease once: one update of the object the last renewal
// returned, or a read first when there is none (or the last write failed).
func (p *Publisher) Renew(ctx context.Context) error {
	p.mu.Lock()
	cur := p.last
	p.last = nil
	p.mu.Unlock()
	if cur == nil {
		return p.Publish(ctx)
	}
	cur = cur.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	secs := p.durationSeconds()
	cur.Spec.RenewTime, cur.Spec.LeaseDurationSeconds = &now, &secs
	out, err := p.client.CoordinationV1().Leases(p.namespace).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renew node lease %s/%s: %w", p.namespace, cur.Name, err)
	}
	p.remember(out)
	return nil
}

func (p *Publisher) remember(l *coordinationv1.Lease) {
	p.mu.Lock()
	if !p.wrote {
		p.firstWrite = time.Now()
	}
	p.last, p.wrote = l, true
	p.mu.Unlock()
}

// durationSeconds is the lease's duration in whole seconds, rounded up:
// other nodes wait at least that long before they take this one for lost
// (liveness.Observer.ReadDeclared), so it must never say less than it
// holds.
func (p *Publisher) durationSeconds() int32 {
	p.mu.Lock()
	var since time.Duration
	if p.wrote {
		since = time.Since(p.firstWrite)
	}
	d := liveness.Config{Duration: p.Duration, Margin: p.Margin}.Declared(p.predecessor, p.wrote, since)
	p.mu.Unlock()
	return int32((d + time.Second - 1) / time.Second)
}

// NewPublisher returns the publisher of node's address in namespace.
func NewPublisher(client kubernetes.Interface, namespace string, node replica.Node, address string) *Publisher {
	return &Publisher{client: client, namespace: namespace, node: node, address: address, Duration: 40 * time.Second, Margin: 500 * time.Millisecond}
}

// Publish creates or renews the Lease once, with the current address.
func (p *Publisher) Publish(ctx context.Context) error {
	leases := p.client.CoordinationV1().Leases(p.namespace)
	now := metav1.NewMicroTime(time.Now())
	secs := p.durationSeconds()
	holder := string(p.node)
	name := LeaseName(p.node)
	cur, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		out, err := leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.namespace,
				Labels:      map[string]string{"app.kubernetes.io/name": "ferry", LabelComponent: componentValue},
				Annotations: map[string]string{AnnotationPeerAddress: p.address}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node lease %s/%s: %w", p.namespace, name, err)
		}
		p.remember(out)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read node lease %s/%s: %w", p.namespace, name, err)
	}
	if cur.Spec.HolderIdentity != nil && *cur.Spec.HolderIdentity != holder {
		return fmt.Errorf("node lease %s/%s is held by %q, not %s: %w", p.namespace, name, *cur.Spec.HolderIdentity, p.node, ports.ErrConflict)
	}
	p.mu.Lock()
	if !p.wrote && cur.Spec.LeaseDurationSeconds != nil && *cur.Spec.LeaseDurationSeconds > 0 {
		// Recorded before the write: whoever reads the Lease as this
		// write left it finds the predecessor's terms here.
		p.predecessor = max(p.predecessor, time.Duration(*cur.Spec.LeaseDurationSeconds)*time.Second)
	}
	p.mu.Unlock()
	secs = p.durationSeconds() // the predecessor's terms, now known, count
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[AnnotationPeerAddress] = p.address
	cur.Spec.HolderIdentity, cur.Spec.LeaseDurationSeconds, cur.Spec.RenewTime = &holder, &secs, &now
	out, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renew node lease %s/%s: %w", p.namespace, name, err)
	}
	p.remember(out)
	return nil
}

// Resolver finds nodes' peer addresses from their Leases, caching each
// for ttl: addresses change only when a daemon restarts with a new one,
// and a failed dial makes the caller retry after the cache expires.
type Resolver struct {
	client    kubernetes.Interface
	namespace string
	ttl       time.Duration
	mu        sync.Mutex
	cache     map[replica.Node]cached
}

type cached struct {
	addr string
	at   time.Time
}

// resolveTimeout bounds one read of a Lease: a healthy API server answers
// in milliseconds, and a peer action waits for it.
const resolveTimeout = 2 * time.Second

// NewResolver returns a resolver reading Leases in namespace.
func NewResolver(client kubernetes.Interface, namespace string, ttl time.Duration) *Resolver {
	return &Resolver{client: client, namespace: namespace, ttl: ttl, cache: map[replica.Node]cached{}}
}

// Resolve returns node's peer address; ErrUnavailable when the node
// publishes none.
func (r *Resolver) Resolve(node replica.Node) (string, error) {
	r.mu.Lock()
	c, ok := r.cache[node]
	r.mu.Unlock()
	if ok && time.Since(c.at) < r.ttl {
		return c.addr, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	l, err := r.client.CoordinationV1().Leases(r.namespace).Get(ctx, LeaseName(node), metav1.GetOptions{})
	if err != nil {
		if ok && c.addr != "" && !apierrors.IsNotFound(err) {
			// The API server is away (or this node is cut off from it):
			// the address the lease last published. A node's address
			// changes only with a new pod, which takes the API server. A
			// lease deleted names no address any more.
			return c.addr, nil
		}
		return "", fmt.Errorf("peer address of node %s: %v: %w", node, err, ports.ErrUnavailable)
	}
	addr := l.Annotations[AnnotationPeerAddress]
	if addr == "" || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != string(node) {
		return "", fmt.Errorf("peer address of node %s: lease %s publishes none: %w", node, l.Name, ports.ErrUnavailable)
	}
	r.mu.Lock()
	r.cache[node] = cached{addr: addr, at: time.Now()}
	r.mu.Unlock()
	return addr, nil
}

// Leases reads every node's Lease (ports.NodeLeases): one list of Ferry's
// node leases, each mapped to its holder. A lease's value is its
// resourceVersion, which changes with every write of it and only then.
type Leases struct {
	client    kubernetes.Interface
	namespace string
}

var _ ports.NodeLeases = (*Leases)(nil)

// NewLeases returns the reader of the node leases in namespace.
func NewLeases(client kubernetes.Interface, namespace string) *Leases {
	return &Leases{client: client, namespace: namespace}
}

// Leases lists the node leases; a lease without a holder, or whose name
// is not its holder's, is skipped (never taken for another node's).
func (l *Leases) Leases(ctx context.Context) (map[replica.Node]ports.LeaseRecord, error) {
	list, err := l.client.CoordinationV1().Leases(l.namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelComponent + "=" + componentValue})
	if err != nil {
		return nil, fmt.Errorf("list node leases in %s: %w", l.namespace, err)
	}
	out := make(map[replica.Node]ports.LeaseRecord, len(list.Items))
	for _, it := range list.Items {
		if it.Spec.HolderIdentity == nil {
			continue
		}
		n := replica.Node(*it.Spec.HolderIdentity)
		if LeaseName(n) != it.Name {
			continue
		}
		rec := ports.LeaseRecord{Value: it.ResourceVersion, PeerAddress: it.Annotations[AnnotationPeerAddress]}
		if d := it.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
			rec.Duration = time.Duration(*d) * time.Second
		}
		out[n] = rec
	}
	return out, nil
}
