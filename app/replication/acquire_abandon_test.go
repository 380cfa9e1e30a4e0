package replication_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// slowPromotion is the shared state with one slow write: the compare-and-
// swap that makes node the active primary is held (an API server that is
// slow to answer a PUT) until the test lets it go.
type slowPromotion struct {
	ports.ClusterState
	node     replica.Node
	once     sync.Once
	inFlight chan struct{} // closed when the promotion is computed, not yet written
	proceed  chan struct{} // closed by the test: write it
	done     chan struct{} // closed once that Update returned
}

func (s *slowPromotion) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	held := false
	st, err := s.ClusterState.Update(ctx, id, func(st *replica.State) error {
		before, _ := st.Replica(s.node)
		if err := fn(st); err != nil {
			return err
		}
		after, _ := st.Replica(s.node)
		if !before.Active && after.Active && st.Primary == s.node {
			s.once.Do(func() {
				held = true
				close(s.inFlight)
				<-s.proceed
			})
		}
		return nil
	})
	if held {
		close(s.done)
	}
	return st, err
}

// A publish on b waits for b to become the primary. b catches up and its
// promotion (a compare-and-swap) is on its way to the API server when the
// publish's wait runs out. Acquire answers "not the primary yet", and the
// node, on that answer, reads the state (b is not active yet), resizes the
// workload and moves b's pod back into the ReplicaSet. Then the write
// lands: b is the active primary of a new epoch, with its pod inside the
// ReplicaSet (counted as a secondary, outside the primary's budget: a
// scale-down or a drain may take the primary's volume manager).
//
// An Acquire that answers an error must not be followed by a promotion it
// had already started: it must wait for that write's outcome (and answer
// success if it landed).
func TestAnAcquireThatAnswersNotPrimaryIsNeverFollowedByItsPromotion(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	slow := &slowPromotion{ClusterState: c.state, node: "b",
		inFlight: make(chan struct{}), proceed: make(chan struct{}), done: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(slow.proceed)
		}
	}()
	c.recorder = &recordingState{ClusterState: slow}
	c.write("a", "v1")
	c.startWith("a", func(cfg *replication.Config) { cfg.SnapshotInterval = time.Hour })
	c.start("b")
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// a's pod moves away: its release records the final snapshot.
	if err := c.reps["a"].ReleaseAndWait(rctx); err != nil {
		t.Fatal(err)
	}

	pctx, pcancel := context.WithCancel(ctx)
	answer := make(chan error, 1)
	go func() { answer <- c.reps["b"].Acquire(pctx) }()
	select {
	case <-slow.inFlight:
	case <-time.After(10 * time.Second):
		st, _ := c.state.Get(ctx, volID)
		t.Fatalf("b never tried to become the primary; state %+v, b %+v", st, c.reps["b"].Status())
	}
	// The publish's wait runs out while the promotion is being written.
	pcancel()
	var err error
	answered := false
	select {
	case err = <-answer:
		answered = true
	case <-time.After(2 * time.Second):
		// Acquire waits for the outcome of the write it started (the
		// fixed behaviour): let it land below.
	}
	released = true
	close(slow.proceed)
	select {
	case <-slow.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held promotion never returned")
	}
	if !answered {
		select {
		case err = <-answer:
		case <-time.After(10 * time.Second):
			t.Fatal("Acquire did not answer once its promotion was written")
		}
	}
	st, _ := c.state.Get(ctx, volID)
	if b, _ := st.Replica("b"); err != nil && b.Active && st.Primary == "b" {
		t.Fatalf("Acquire answered %q (the node moves b's pod back into the ReplicaSet on that answer), "+
			"then b became the active primary of epoch %d: %+v", err, st.Epoch, st)
	}
}

// Guard for the fix above: a publish's wait that runs out while b is
// still waiting for another active primary (nothing in flight) answers
// at once, and b is never promoted afterwards (its acquisition is
// abandoned, the old primary's release notwithstanding).
func TestAnAcquireGivenUpWhileAnotherIsActiveIsAbandoned(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.startWith("a", func(cfg *replication.Config) { cfg.SnapshotInterval = time.Hour })
	c.start("b")
	c.eventually("b joined", func() bool { st, _ := c.state.Get(ctx, volID); _, ok := st.Replica("b"); return ok })
	pctx, pcancel := context.WithCancel(ctx)
	answer := make(chan error, 1)
	go func() { answer <- c.reps["b"].Acquire(pctx) }()
	c.eventually("b waits for a", func() bool { s := c.reps["b"].Status(); return s.Acquiring && s.Waiting != "" })
	pcancel()
	select {
	case err := <-answer:
		if !errors.Is(err, refusal.ErrPending) {
			t.Fatalf("Acquire given up: %v, want ErrPending", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire given up while a is active did not answer")
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.reps["a"].ReleaseAndWait(rctx); err != nil {
		t.Fatal(err)
	}
	c.eventually("b caught up with a's final snapshot", func() bool {
		st, _ := c.state.Get(ctx, volID)
		a, _ := st.Replica("a")
		b, _ := st.Replica("b")
		return b.Holds() == a.Holds() && c.reps["b"].Status().Snapshot == a.Snapshot
	})
	if st, _ := c.state.Get(ctx, volID); st.Primary == "b" {
		t.Fatalf("an abandoned acquisition promoted b: %+v", st)
	}
}
