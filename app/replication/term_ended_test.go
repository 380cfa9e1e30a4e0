package replication_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// The primary's node stops answering (paused, or cut off by a firewall
// that drops its packets) while a secondary is listing or fetching from
// it: the call waits, and the transport's own liveness checks end it only
// after tens of seconds. The secondary takes the volume over meanwhile
// (its node's daemon, by compare-and-swap) and the pod's publish asks its
// replica to be the primary: the call to the lost primary, of an ended
// term, must stop as soon as the state shows the takeover, or the publish
// (and the pod, the failover) waits on it.
func TestAPeerCallToAPrimaryThatStoppedAnsweringEndsWhenTheVolumeIsTakenOver(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1 and reported it", func() bool { return c.reportedHolding("b", "v1") })
	c.net.Pause("a")
	defer c.net.Resume("a")
	c.write("a", "v2")
	c.eventually("b's call to a waits on a that answers nothing", func() bool { return c.net.Waiting("a") > 0 })
	// a's node is lost: its volume manager stops, b's daemon takes over.
	c.stop("a")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error {
		if err := replica.Acknowledge(s, "a", s.Epoch, []replica.Node{"b"}); err != nil { // a's daemon's guard, before the loss
			return err
		}
		return replica.Takeover(s, "b", "a", 10)
	}); err != nil {
		t.Fatal(err)
	}
	// A bound on progress, not a speed measure: without the stop the
	// call waits as long as a stays paused.
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reps["b"].Acquire(actx); err != nil {
		t.Fatalf("b did not become the primary after taking the volume over: %v (calls still waiting on a: %d)", err, c.net.Waiting("a"))
	}
	if n := c.net.Waiting("a"); n != 0 {
		t.Errorf("%d calls still wait on a after b became the primary", n)
	}
	st, _ := c.state.Get(ctx, volID)
	if b, _ := st.Replica("b"); st.Primary != "b" || !b.Active {
		t.Fatalf("b is not the active primary: %+v", st)
	}
}

// takeoverAfterRead writes a takeover of the volume by b from a right
// after the first read it serves (once armed) after which b's next step
// is a call to a, and answers that read with the state from before: the takeover lands after the volume manager read
// its view and before it acts on it, as a survivor's compare-and-swap can.
type takeoverAfterRead struct {
	replication.SharedState
	armed atomic.Bool
	// delivered tells of each change the watch handed to the volume
	// manager (its forwarder counts a change as it takes it).
	delivered chan struct{}
}

// Watch passes the store's changes on one by one, unbuffered, and tells
// delivered of each the volume manager took.
func (s *takeoverAfterRead) Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error) {
	in, err := s.SharedState.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make(chan struct{})
	go func() {
		defer close(out)
		for range in {
			select {
			case out <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case s.delivered <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

func (s *takeoverAfterRead) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	st, err := s.SharedState.Get(ctx, id)
	a, _ := st.Replica("a")
	b, _ := st.Replica("b")
	// b's next step is a call to a: it reported itself behind.
	next := err == nil && a.Active && a.Snapshot > b.Snapshot && !b.Ready
	if next && s.armed.CompareAndSwap(true, false) {
		for len(s.delivered) > 0 {
			<-s.delivered // changes told before the takeover
		}
		if _, uerr := s.SharedState.Update(ctx, id, func(s *replica.State) error {
			if err := replica.Acknowledge(s, "a", s.Epoch, []replica.Node{"b"}); err != nil {
				return err
			}
			return replica.Takeover(s, "b", "a", 10)
		}); uerr != nil {
			panic(uerr)
		}
		// The watch tells the volume manager of the takeover before this
		// read's answer is acted on.
		select {
		case <-s.delivered:
		case <-time.After(10 * time.Second):
			panic("the watch did not tell the volume manager of the takeover")
		}
	}
	return st, err
}

// The same loss, with the takeover landing between the read of the view
// a listing of the lost primary is decided on and the listing's start:
// the change the watch told of then is checked as the action starts.
func TestATakeoverJustBeforeAPeerCallStartsStillEndsIt(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	core, logs := observer.New(zap.InfoLevel)
	c.log = zap.New(core)
	c.write("a", "v1")
	c.start("a")
	wrapped := &takeoverAfterRead{SharedState: c.state, delivered: make(chan struct{}, 16)}
	c.stateOverride = wrapped
	c.start("b")
	c.eventually("b holds v1 and reported it", func() bool { return c.reportedHolding("b", "v1") })
	c.stop("b")
	c.write("a", "v2")
	bHolds := c.newestStored("b")
	c.eventually("a reported a snapshot b lacks", func() bool {
		st, _ := c.state.Get(ctx, volID)
		a, _ := st.Replica("a")
		return a.Snapshot > bHolds
	})
	c.stop("a") // a's node is lost
	c.net.Pause("a")
	defer c.net.Resume("a")
	wrapped.armed.Store(true)
	c.resume("b")
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reps["b"].Acquire(actx); err != nil {
		t.Fatalf("b did not become the primary after taking the volume over: %v (calls still waiting on a: %d)", err, c.net.Waiting("a"))
	}
	if wrapped.armed.Load() {
		t.Fatal("b never read its state after it restarted: the scenario did not happen")
	}
	if logs.FilterMessage("peer action stopped: its term ended").Len() == 0 {
		t.Fatal("b became the primary without a peer call to stop: the takeover did not land between its read and a peer action, and the scenario proves nothing")
	}
}

// reportedHolding: n holds content and its newest snapshot is what the
// state says it holds.
func (c *cluster) reportedHolding(n replica.Node, content string) bool {
	st, _ := c.state.Get(ctx, volID)
	r, _ := st.Replica(n)
	return c.holds(n, content) && r.Snapshot != 0 && r.Snapshot == c.newestStored(n)
}
