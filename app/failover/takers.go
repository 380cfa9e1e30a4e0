package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Takers is this node's acknowledgement of the nodes that may take its
// primaries' volumes over (liveness.Ledger, replica.Acknowledge): the
// Guard asks exactly these for promises, and only these may take over.
// Every taker is written to the ledger here before the compare-and-swap
// that lets it take over is sent, so the Guard never misses one, whatever
// its view of the shared state shows.
type Takers struct {
	node    replica.Node
	cluster ports.ClusterState
	log     *zap.Logger

	mu     sync.Mutex
	ledger *liveness.Ledger
	// before runs before a taker is recorded and its acknowledgement sent
	// (the Guard's bound on the volume's permit); its error stops both.
	before func(id volume.ID, epoch replica.Epoch) error
	// beforeClaim runs before a claim (the Guard: the node's permit is
	// published); its error refuses the claim.
	beforeClaim func(volume.ID) error
}

// BeforeClaim makes f run before every Claim: an error from f refuses the
// claim (nothing is written; the publish is retried).
func (t *Takers) BeforeClaim(f func(volume.ID) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.beforeClaim = f
}

// BeforeAcknowledge makes f run before any taker of a volume is
// recorded and acknowledged: an error from f and nothing is (the
// acknowledgement is tried again later).
func (t *Takers) BeforeAcknowledge(f func(id volume.ID, epoch replica.Epoch) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.before = f
}

// NewTakers returns node's acknowledgements, written to cluster.
func NewTakers(node replica.Node, cluster ports.ClusterState, log *zap.Logger) *Takers {
	return &Takers{node: node, cluster: cluster, log: log, ledger: liveness.NewLedger(node)}
}

var errNothingToAcknowledge = errors.New("nothing to acknowledge")

// Acknowledge acknowledges, by compare-and-swap on the newest state of
// volume id, every replica that holds a snapshot and is not yet a taker,
// when this node is its active primary; recorded in the ledger before the
// write. Nothing to acknowledge (or not the primary here) is not an error.
// The Guard calls it whenever a copy reports (a publish claims the volume
// instead: Claim). BeforeAcknowledge's function runs first; its error
// acknowledges nothing.
func (t *Takers) Acknowledge(ctx context.Context, id volume.ID) error {
	var acked []replica.Node
	st, err := t.cluster.Update(ctx, id, func(s *replica.State) error {
		acked = replica.Candidates(*s, t.node)
		if len(acked) == 0 {
			return errNothingToAcknowledge
		}
		if err := t.runBefore(s.Volume, s.Epoch); err != nil {
			return err
		}
		t.mu.Lock()
		t.ledger.Intend(s.Volume, s.Epoch, acked) // before the write: see liveness.Ledger
		t.mu.Unlock()
		return replica.Acknowledge(s, t.node, s.Epoch, acked)
	})
	switch {
	case errors.Is(err, errNothingToAcknowledge):
		return nil
	case err != nil:
		return fmt.Errorf("acknowledge the takers of %s: %w", id, err)
	}
	t.Learn(st)
	t.log.Info("takers acknowledged: only these may take the volume over from this node", zap.String("volume", string(id)),
		zap.Uint64("epoch", uint64(st.Epoch)), zap.Any("takers", acked))
	return nil
}

// Resume records, by compare-and-swap, that this node's primary of
// volume id resumes writing (replica.Resume) before any pod writes again:
// a takeover decided on a lease verdict this node has since outlived is
// then refused. False (no error) when this node is no longer the active
// primary: it was taken over and must not write.
func (t *Takers) Resume(ctx context.Context, id volume.ID) (bool, error) {
	st, err := t.cluster.Update(ctx, id, func(s *replica.State) error {
		return replica.Resume(s, t.node, s.Epoch)
	})
	if errors.Is(err, replica.ErrFenced) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	t.Learn(st)
	return true, nil
}

// runBefore runs the BeforeAcknowledge function, if any, for volume id's
// takers in epoch.
func (t *Takers) runBefore(id volume.ID, epoch replica.Epoch) error {
	t.mu.Lock()
	before := t.before
	t.mu.Unlock()
	if before == nil {
		return nil
	}
	return before(id, epoch)
}

// Claim is what a read/write publish here does before the pod mounts:
// in one compare-and-swap, acknowledge the copies that may take the
// volume over (as Acknowledge) and resume (as Resume). The copies are
// acknowledged only if BeforeAcknowledge's function lets them be: when
// it refuses (the node does not hold its lease, or the permit does not
// bound the volume yet), the term is resumed alone and the pod is not
// held back; the Guard acknowledges them later, as it does every copy
// that reports. BeforeClaim's function runs first: its error refuses the
// claim, and the pod waits.
func (t *Takers) Claim(ctx context.Context, id volume.ID) error {
	t.mu.Lock()
	beforeClaim := t.beforeClaim
	t.mu.Unlock()
	if beforeClaim != nil {
		if err := beforeClaim(id); err != nil {
			return fmt.Errorf("claim %s for a pod here: %w", id, err)
		}
	}
	var acked []replica.Node
	var notYet error
	st, err := t.cluster.Update(ctx, id, func(s *replica.State) error {
		acked, notYet = replica.Candidates(*s, t.node), nil
		if len(acked) > 0 {
			if err := t.runBefore(s.Volume, s.Epoch); err != nil {
				acked, notYet = nil, err
				return replica.Resume(s, t.node, s.Epoch)
			}
			t.mu.Lock()
			t.ledger.Intend(s.Volume, s.Epoch, acked) // before the write: see liveness.Ledger
			t.mu.Unlock()
			if err := replica.Acknowledge(s, t.node, s.Epoch, acked); err != nil {
				return err
			}
		}
		return replica.Resume(s, t.node, s.Epoch)
	})
	if err != nil {
		return fmt.Errorf("claim %s for a pod here: %w", id, err)
	}
	t.Learn(st)
	if len(acked) > 0 {
		t.log.Info("takers acknowledged: only these may take the volume over from this node", zap.String("volume", string(id)),
			zap.Uint64("epoch", uint64(st.Epoch)), zap.Any("takers", acked))
	}
	if notYet != nil {
		t.log.Info("takers not acknowledged with the publish; the guard acknowledges them later (until then a loss of this node waits for it)", zap.String("volume", string(id)), zap.Error(notYet))
	}
	return nil
}

// Primary reads volume id's newest state (folded into the ledger) and
// reports whether this node is its active primary.
func (t *Takers) Primary(ctx context.Context, id volume.ID) (bool, error) {
	st, err := t.cluster.Get(ctx, id)
	if err != nil {
		return false, err
	}
	t.Learn(st)
	r, ok := st.Replica(t.node)
	return ok && r.Active && st.Primary == t.node, nil
}

// Learn folds states read from anywhere, however old, into the ledger
// (liveness.Ledger.Learn).
func (t *Takers) Learn(states ...replica.State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range states {
		t.ledger.Learn(s)
	}
}

// Forget drops volume id: no copy of it is here any more.
func (t *Takers) Forget(id volume.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ledger.Forget(id)
}

// Terms are the terms here with takers acknowledged.
func (t *Takers) Terms() []liveness.Term {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ledger.Terms()
}

// Of are the takers acknowledged for volume id's term here.
func (t *Takers) Of(id volume.ID) []replica.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ledger.Takers(id)
}

// All are every node acknowledged by some term here: the nodes to ask
// for promises.
func (t *Takers) All() []replica.Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ledger.AllTakers()
}
