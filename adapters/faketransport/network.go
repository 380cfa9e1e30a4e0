package faketransport

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// ErrUnreachable: the node is cut off from the network or unknown to it.
// A real transport fails the same way when the peer does not answer;
// retrying later may succeed.
var ErrUnreachable = fmt.Errorf("node unreachable: %w", ports.ErrUnavailable)

// Network is a simulated network of nodes, safe for concurrent use.
type Network struct {
	mu     sync.Mutex
	stores map[replica.Node]Source
	cut    map[replica.Node]bool
	breaks map[replica.Node]int64 // streams from the node fail after so many bytes
	// paused nodes answer nothing until Resume: their channel is closed
	// then.
	paused map[replica.Node]chan struct{}
	// waiting counts, per node, the calls and reads waiting on its pause.
	waiting map[replica.Node]int
}

var _ ports.Transport = (*Network)(nil)

// New returns a network without nodes.
func New() *Network {
	return &Network{stores: map[replica.Node]Source{}, cut: map[replica.Node]bool{}, breaks: map[replica.Node]int64{}, paused: map[replica.Node]chan struct{}{}, waiting: map[replica.Node]int{}}
}

// Add registers (or replaces) the store that serves node's streams. It
// leaves a cut in place: a node replaced while partitioned stays so.
func (n *Network) Add(node replica.Node, store Source) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stores[node] = store
}

// Cut partitions node off: later Fetches from it answer ErrUnreachable.
// Streams already handed out are not interrupted.
func (n *Network) Cut(node replica.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[node] = true
}

// Heal ends a partition made by Cut, and stream breaks.
func (n *Network) Heal(node replica.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cut, node)
	delete(n.breaks, node)
}

// BreakStreams makes every stream fetched from node from now on fail after
// its first `after` bytes, as a connection lost mid-transfer does.
func (n *Network) BreakStreams(node replica.Node, after int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.breaks[node] = after
}

// Pause makes node answer nothing, as a node paused or cut off by a
// firewall that drops its packets: a listing or a fetch from it, and a
// read of a stream it handed out, wait until Resume or until the caller's
// context ends (a real transport ends the wait when its context is
// cancelled; its own liveness checks take tens of seconds).
func (n *Network) Pause(node replica.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.paused[node]; !ok {
		n.paused[node] = make(chan struct{})
	}
}

// Resume ends a Pause.
func (n *Network) Resume(node replica.Node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch, ok := n.paused[node]; ok {
		close(ch)
		delete(n.paused, node)
	}
}

// waitPaused waits while node is paused; the context's error when it
// ends first.
func (n *Network) waitPaused(ctx context.Context, node replica.Node) error {
	for {
		n.mu.Lock()
		ch, ok := n.paused[node]
		if ok {
			n.waiting[node]++
		}
		n.mu.Unlock()
		if !ok {
			return nil
		}
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = fmt.Errorf("node %q answers nothing: %w", node, ctx.Err())
		}
		n.mu.Lock()
		n.waiting[node]--
		n.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Waiting counts the calls and stream reads waiting on node's pause now.
func (n *Network) Waiting(node replica.Node) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.waiting[node]
}

// pausable is a stream whose reads wait while its node is paused.
type pausable struct {
	ctx  context.Context
	net  *Network
	node replica.Node
	r    io.ReadCloser
}

func (p *pausable) Read(b []byte) (int, error) {
	if err := p.net.waitPaused(p.ctx, p.node); err != nil {
		return 0, err
	}
	return p.r.Read(b)
}

func (p *pausable) Close() error { return p.r.Close() }

// brokenStream delivers the first bytes of a stream, then fails.
type brokenStream struct {
	r    io.ReadCloser
	left int64
}

func (b *brokenStream) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("connection lost mid-stream: %w", ports.ErrUnavailable)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	k, err := b.r.Read(p)
	b.left -= int64(k)
	return k, err
}

func (b *brokenStream) Close() error { return b.r.Close() }

// Snapshots lists node's snapshots of a volume, with the store's errors.
func (n *Network) Snapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	store, err := n.peer(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("snapshots of %s on node %q: %w", id, node, err)
	}
	if err := n.waitPaused(ctx, node); err != nil {
		return nil, fmt.Errorf("snapshots of %s on node %q: %w", id, node, err)
	}
	return store.ListSnapshots(ctx, id)
}

func (n *Network) peer(ctx context.Context, node replica.Node) (Source, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	store, known := n.stores[node]
	if !known || n.cut[node] {
		return nil, ErrUnreachable
	}
	return store, nil
}

// Fetch asks node's store for req's stream, with that store's errors
// (ErrNotFound, ErrNotOwned) passed through as a remote peer would report
// them. The store is called without holding the network's lock, so a slow
// peer never blocks the others.
func (n *Network) Fetch(ctx context.Context, node replica.Node, req ports.SendRequest) (io.ReadCloser, error) {
	store, err := n.peer(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("fetch %s@%s from node %q: %w", req.Volume, req.To, node, err)
	}
	if err := n.waitPaused(ctx, node); err != nil {
		return nil, fmt.Errorf("fetch %s@%s from node %q: %w", req.Volume, req.To, node, err)
	}
	s, err := store.Send(ctx, req)
	if err != nil {
		return nil, err
	}
	var r io.ReadCloser = &pausable{ctx: ctx, net: n, node: node, r: s}
	n.mu.Lock()
	after, broken := n.breaks[node]
	n.mu.Unlock()
	if broken {
		return &brokenStream{r: r, left: after}, nil
	}
	return r, nil
}

// Source is what a fake peer serves from its store: listings and send
// streams.
type Source interface {
	ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error)
	Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error)
}

// CSISnapshots lists node's CSI snapshots of a volume, with the store's
// errors (ports.SnapshotPeers).
func (n *Network) CSISnapshots(ctx context.Context, node replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	list, err := n.Snapshots(ctx, node, id)
	if err != nil {
		return nil, err
	}
	var out []ports.SnapshotInfo
	for _, s := range list {
		if volume.IsSnapshotStoreName(s.Name) {
			out = append(out, s)
		}
	}
	return out, nil
}
