package orchestration_test

import (
	"context"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/orchestration"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// claims is a shared fake of the claims' API: Select is a compare-and-swap.
type claims struct {
	mu       sync.Mutex
	pending  []ports.PendingClaim
	nodes    []replica.Node
	selected map[string]replica.Node
	writes   int
}

func (c *claims) Pending(context.Context) ([]ports.PendingClaim, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ports.PendingClaim
	for _, p := range c.pending {
		if _, ok := c.selected[p.UID]; !ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c *claims) Candidates(context.Context) ([]replica.Node, error) { return c.nodes, nil }

func (c *claims) Select(_ context.Context, p ports.PendingClaim, n replica.Node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.selected[p.UID]; ok {
		return ports.ErrConflict
	}
	c.selected[p.UID] = n
	c.writes++
	return nil
}

func (c *claims) Changes() <-chan struct{} { return nil }

func TestDaemonsBindingAtOnceAgreeOnEveryClaimsNode(t *testing.T) {
	shared := &claims{nodes: []replica.Node{"node1", "node2", "node3"}, selected: map[string]replica.Node{}}
	for i := range 60 {
		shared.pending = append(shared.pending, ports.PendingClaim{Namespace: "ns", Name: "c", UID: "uid-" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	// Three daemons whose views lag differently: each sees the claims
	// before any selection.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := orchestration.NewBinder(shared, zap.NewNop()).Sync(context.Background()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if shared.writes != len(shared.pending) {
		t.Fatalf("%d selections written for %d claims: each claim is written once", shared.writes, len(shared.pending))
	}
	for _, p := range shared.pending {
		want, _ := placement.SelectNode(p.UID, shared.nodes)
		if shared.selected[p.UID] != want {
			t.Fatalf("claim %s on %s, want %s (the rendezvous choice)", p.UID, shared.selected[p.UID], want)
		}
	}
	// Nothing pending: nothing written.
	if n, err := orchestration.NewBinder(shared, zap.NewNop()).Sync(context.Background()); n != 0 || err != nil {
		t.Fatalf("a second sync selected %d: %v", n, err)
	}
}

func TestNoCandidateIsAnErrorNamingTheClaim(t *testing.T) {
	c := &claims{pending: []ports.PendingClaim{{Namespace: "ns", Name: "data", UID: "u1"}}, selected: map[string]replica.Node{}}
	if _, err := orchestration.NewBinder(c, zap.NewNop()).Sync(context.Background()); err == nil || c.writes != 0 {
		t.Fatalf("with no node: %v, %d writes", err, c.writes)
	}
}
