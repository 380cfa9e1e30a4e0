package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/app/replication"
)

// A pod moves from a to b: a publish on b waits while a is the active
// primary and, given up, leaves b a secondary (ErrPending: the kubelet
// retries); once a's unpublish recorded its final snapshot, b catches up to
// it and becomes the primary of the next epoch, holding a's last write.
func TestHandoverMovesTheLastWriteAndNeverMakesTwoPrimaries(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.startWith("a", func(cfg *replication.Config) { cfg.SnapshotInterval = time.Hour })
	c.start("b")
	c.eventually("b joined", func() bool { st, _ := c.state.Get(ctx, volID); _, ok := st.Replica("b"); return ok })

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.reps["b"].Acquire(short)
	cancel()
	if !errors.Is(err, refusal.ErrPending) {
		t.Fatalf("publish on b while a is active: %v, want ErrPending", err)
	}
	st, _ := c.state.Get(ctx, volID)
	if st.Primary != "a" || st.Epoch != 1 {
		t.Fatalf("a publish that gave up changed the primary: %+v", st)
	}

	c.write("a", "the last write before unpublish")
	acquired := make(chan error, 1)
	go func() {
		long, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		acquired <- c.reps["b"].Acquire(long)
	}()
	// b waits for a, whatever happens meanwhile.
	c.eventually("b waits for a", func() bool { s := c.reps["b"].Status(); return s.Acquiring && s.Waiting != "" })
	if s := c.reps["b"].Status(); s.Acquired || s.Primary {
		t.Fatalf("b acquired while a is active: %+v", s)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.reps["a"].ReleaseAndWait(rctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		st, _ := c.state.Get(ctx, volID)
		t.Fatalf("publish on b after a's release: %v; state %+v; b %+v", err, st, c.reps["b"].Status())
	}
	st, _ = c.state.Get(ctx, volID)
	a, _ := st.Replica("a")
	b, _ := st.Replica("b")
	if st.Primary != "b" || st.Epoch != 2 || !b.Active || a.Active {
		t.Fatalf("after the handover: %+v", st)
	}
	if b.Holds() != a.Holds() || !c.holds("b", "the last write before unpublish") {
		t.Fatalf("b became the primary without a's final snapshot: a %+v, b %+v", a, b)
	}
	// Unpublish on b, publish on a again: the volume moves back.
	if err := c.reps["b"].ReleaseAndWait(rctx); err != nil {
		t.Fatal(err)
	}
	if err := c.reps["a"].Acquire(rctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.state.Get(ctx, volID); st.Primary != "a" || st.Epoch != 3 {
		t.Fatalf("after moving back: %+v", st)
	}
	// A second release is answered at once (idempotent unpublish).
	if err := c.reps["b"].ReleaseAndWait(rctx); err != nil {
		t.Fatal(err)
	}
}
