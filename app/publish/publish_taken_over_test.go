package publish_test

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/app/publish"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// takeoverAfterAck acknowledges node-2 as node-1's taker (as
// failover.Takers does) and then lets node-2's survivor take the volume
// over: its compare-and-swap lands between the publish's acknowledgement
// and its remount check.
type takeoverAfterAck struct{ w *remountWorld }

func (a takeoverAfterAck) Claim(ctx context.Context, id volume.ID) error {
	if _, err := a.w.states.Update(ctx, id, func(s *replica.State) error {
		if err := replica.Acknowledge(s, cfg.Node, s.Epoch, replica.Candidates(*s, cfg.Node)); err != nil {
			return err
		}
		return replica.Resume(s, cfg.Node, s.Epoch)
	}); err != nil {
		return err
	}
	_, err := a.w.states.Update(ctx, id, func(s *replica.State) error { return replica.Takeover(s, "node-2", cfg.Node, 1) })
	return err
}

// Review 21 (change 7, the remount rule): a read/write publish on node-1
// promotes its replica (Acquire), acknowledges node-2, and then reads the
// state for the remount decision. A takeover by node-2 landed in between
// (node-1 was taken for lost: a survivor on a lease read from before
// node-1 renewed, or node-1 declared out of service). The state read now
// shows node-2 the active primary: NeedsRemount answers
// RemountUnknownTerm, remountIfNeeded remounts and returns nil, and the
// publish bind-mounts the copy read/write: a pod writes on node-1, on a
// fenced branch, while node-2 is the volume's primary (two writers).
//
// A publish whose fresh state does not show this node the active primary
// must not mount read/write (ErrNotPrimary, as when Acquire fails).
func TestAPublishRacedByATakeoverDoesNotMountReadWrite(t *testing.T) {
	w := newRemountWorld(t)
	w.n = publish.New(cfg, w.host, w.host, zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: w.states, Control: w.control, Workload: w.work, Events: w.events, Wait: time.Second, Takers: takeoverAfterAck{w}}))
	err := w.publish("pod-a", false)
	st, _ := w.states.Get(ctx, "v")
	if _, mounted := w.host.targets[target("pod-a")]; err == nil || mounted {
		t.Fatalf("publish answered %v and mounted %s read/write while %s is the active primary of epoch %d (node-1 on the branch it left): two writers",
			err, target("pod-a"), st.Primary, st.Epoch)
	}
}
