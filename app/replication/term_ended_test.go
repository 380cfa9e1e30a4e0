package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
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
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot != 0 && b.Snapshot == c.newestStored("b")
	})
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
