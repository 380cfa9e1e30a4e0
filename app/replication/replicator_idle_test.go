package replication_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// countingState counts reads of the shared state; it keeps the fake's
// Watch, so the volume manager may sleep between changes.
type countingState struct {
	*fakecluster.Store
	gets atomic.Int64
}

func (c *countingState) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, id)
}

// countingStore counts listings of the local snapshots.
type countingStore struct {
	*memstore.Store
	lists atomic.Int64
}

func (c *countingStore) ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error) {
	c.lists.Add(1)
	return c.Store.ListSnapshots(ctx, id)
}

// runIdle runs n's volume manager over its own view of the shared state
// and store (snapshots only when asked) until stopped or the test ends.
func (c *cluster) runIdle(n replica.Node, state ports.ClusterState, store ports.SnapshotStore) *replication.Replicator {
	c.reps[n] = replication.New(replication.Config{Node: n, Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 3},
		store, shared(state), c.net, c.events, zap.NewNop())
	c.resume(n)
	return c.reps[n]
}

// An idle secondary reads nothing, neither the shared state nor its pool,
// until the state changes; then it catches up at once. (Polling, it read
// both every tick: 1 % of a core per idle volume here.)
func TestAnIdleSecondaryReadsNothingUntilTheStateChanges(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	// The primary snapshots only when asked: it is idle between requests.
	c.startWith("a", func(cfg *replication.Config) { cfg.SnapshotInterval = time.Hour })
	state := &countingState{Store: c.state}
	store := &countingStore{Store: c.stores["b"]}
	b := c.runIdle("b", state, store)

	c.reps["a"].SnapshotNow()
	caughtUp := func(content string) func() bool {
		return func() bool {
			st, _ := c.state.Get(ctx, volID)
			pa, _ := st.Replica("a")
			pb, _ := st.Replica("b")
			return c.holds("b", content) && pb.Ready && pb.Holds() == pa.Holds() && b.Status().Ready
		}
	}
	c.eventually("b caught up with v1", caughtUp("v1"))

	// 200 ticks of b's with nothing happening, on the test's clock: b is
	// stopped and stepped. The first 64 ticks let b finish what it began
	// (a back-off, its own last write told as a change).
	c.stop("b")
	c.ticks("b", replication.MaxBackoffTicks)
	gets, lists := state.gets.Load(), store.lists.Load()
	c.ticks("b", 200)
	if g, l := state.gets.Load()-gets, store.lists.Load()-lists; g > 0 || l > 0 {
		t.Fatalf("an idle secondary read the shared state %d times and listed its pool %d times in 200 ticks; status %+v", g, l, b.Status())
	}

	// A change wakes it: the primary snapshots new data, b fetches it.
	c.resume("b")
	c.write("a", "v2")
	c.reps["a"].SnapshotNow()
	c.eventually("b caught up with v2", caughtUp("v2"))
}
