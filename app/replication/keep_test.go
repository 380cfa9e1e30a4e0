package replication_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// fencedReturn: a snapshots v2 that b never receives, is lost, writes v3
// after its last snapshot (never snapshotted); b takes over in a new epoch
// and snapshots. a's volume manager is not running when it returns. The
// other nodes (not started) may hold a copy later.
func fencedReturn(t *testing.T, others ...replica.Node) *cluster {
	c := newCluster(t, 2, append([]replica.Node{"a", "b"}, others...)...)
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1 and reported it", func() bool {
		st, _ := c.state.Get(ctx, volID)
		b, _ := st.Replica("b")
		return c.holds("b", "v1") && b.Snapshot > 0 && b.Snapshot == c.newestStored("b")
	})
	c.stop("b")
	bHolds := c.newestStored("b")
	c.write("a", "v2-fenced")
	c.eventually("a snapshotted v2 after b's newest", func() bool {
		st, _ := c.state.Get(ctx, volID)
		r, _ := st.Replica("a")
		return r.Snapshot > bHolds
	})
	c.stop("a")
	c.write("a", "v3-never-snapshotted")
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { return ackThenTakeoverBehind(s, "b", "a") }); err != nil {
		t.Fatal(err)
	}
	c.start("b")
	c.write("b", "v4")
	c.eventually("b snapshotted in epoch 2", func() bool {
		st, _ := c.state.Get(ctx, volID)
		r, _ := st.Replica("b")
		return r.SnapshotEpoch == 2
	})
	return c
}

func (e *events) withReason(reason string) []ports.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ports.Event
	for _, ev := range e.got {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// The returning primary's copy is rolled back only after what it
// discards, its fenced snapshot and the writes after it, is kept aside,
// named in a FencedWritesKept event with how to drop it.
func TestAFencedPrimarysWritesAreKeptAsideBeforeItsRollback(t *testing.T) {
	c := fencedReturn(t)
	c.start("a")
	c.eventually("a holds v4", func() bool { return c.holds("a", "v4") })
	if got := keptData(t, c, "a"); got != "v3-never-snapshotted" {
		t.Fatalf("the copy kept aside holds %q, want a's last write", got)
	}
	keptBeforeDiscard(t, c)
}

// keptBeforeDiscard: the copy was kept before a rollback, or a
// replacement (when the successor pruned the common base first), discarded
// what it holds.
func keptBeforeDiscard(t *testing.T, c *cluster) {
	t.Helper()
	reasons := c.events.reasons()
	d := slices.IndexFunc(reasons, func(r string) bool { return r == "RolledBack" || r == "Replaced" })
	if k := slices.Index(reasons, "FencedWritesKept"); d < 0 || k < 0 || k > d {
		t.Fatalf("events %v: the copy is kept before the rollback or replacement", reasons)
	}
}

// keptData is what the copy named in the FencedWritesKept event holds.
func keptData(t *testing.T, c *cluster, n replica.Node) string {
	t.Helper()
	kept := c.events.withReason("FencedWritesKept")
	if len(kept) != 1 {
		t.Fatalf("FencedWritesKept events: %+v; all: %v", kept, c.events.reasons())
	}
	msg := kept[0].Message
	prefix := "kept/" + string(volID) + "-fenced-e2-ferry-1-"
	i := strings.Index(msg, prefix)
	if i < 0 || !strings.Contains(msg, "drop: ") {
		t.Fatalf("FencedWritesKept says %q: want the copy %s... and how to drop it", msg, prefix)
	}
	name, _, _ := strings.Cut(msg[i:], " ")
	return string(c.stores[n].KeptFiles(name)["data"])
}

// noSpace answers ErrNoSpace to KeepAside while full is set.
type noSpace struct {
	ports.SnapshotStore
	full  atomic.Bool
	tries atomic.Int64
}

func (s *noSpace) KeepAside(ctx context.Context, id volume.ID, name string) (ports.KeptCopy, error) {
	s.tries.Add(1)
	if s.full.Load() {
		return ports.KeptCopy{}, fmt.Errorf("a copy needs more than the pool has: %w", ports.ErrNoSpace)
	}
	return s.SnapshotStore.KeepAside(ctx, id, name)
}

// Without room for the copy, nothing is discarded: the rollback waits,
// says why once, and goes on when space is freed.
func TestWithoutRoomToKeepTheFencedWritesNothingIsRolledBack(t *testing.T) {
	c := fencedReturn(t)
	store := &noSpace{SnapshotStore: c.stores["a"]}
	store.full.Store(true)
	c.storeOverride = map[replica.Node]ports.SnapshotStore{"a": store}
	c.start("a")
	c.eventually("a tried to keep its writes aside a few times", func() bool { return store.tries.Load() >= 3 })
	if !c.holds("a", "v3-never-snapshotted") {
		t.Fatal("a's copy changed although its writes could not be kept")
	}
	// Raised once per situation (a rollback, then a replacement once b
	// pruned the common base), not on every retry.
	if n := len(c.events.withReason("FencedWritesNotKept")); n < 1 || n > 2 {
		t.Fatalf("%d FencedWritesNotKept events, want 1 or 2; all: %v", n, c.events.reasons())
	}
	if r := c.events.reasons(); slices.Contains(r, "RolledBack") || slices.Contains(r, "Replaced") {
		t.Fatalf("events %v: discarded without keeping the writes", r)
	}
	store.full.Store(false)
	c.eventually("a holds v4", func() bool { return c.holds("a", "v4") })
	if got := keptData(t, c, "a"); got != "v3-never-snapshotted" {
		t.Fatalf("the copy kept aside holds %q, want a's last write", got)
	}
	keptBeforeDiscard(t, c)
}

// fencedSurplus: after fencedReturn, a new copy is made on c, of the new
// epoch's snapshot: with b's, replicationFactor 2 is met without a's,
// whose copy is surplus when its node returns.
func fencedSurplus(t *testing.T) *cluster {
	c := fencedReturn(t, "c")
	c.start("c")
	c.eventually("c holds v4 and reported a snapshot of epoch 2", func() bool {
		st, _ := c.state.Get(ctx, volID)
		r, _ := st.Replica("c")
		return c.holds("c", "v4") && r.SnapshotEpoch == 2
	})
	return c
}

// terminator is a's volume manager, not running (stopped by SIGTERM
// before Terminate), on store.
func (c *cluster) terminator(n replica.Node, store ports.SnapshotStore) *replication.Replicator {
	return replication.New(replication.Config{Node: n, Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: 20 * time.Millisecond, Keep: 3},
		store, c.state, c.net, c.events, zap.NewNop())
}

// left: n's copy is destroyed and its entry gone.
func (c *cluster) left(n replica.Node) bool {
	st, _ := c.state.Get(ctx, volID)
	_, listed := st.Replica(n)
	_, err := c.stores[n].GetVolume(ctx, volID)
	return !listed && errors.Is(err, ports.ErrNotFound)
}

// A node back after a takeover whose copy became surplus leaves on
// SIGTERM by the safe-deletion rule, but only after its fenced term's
// snapshot and the writes after it are kept aside.
func TestASurplusCopyWithAFencedTermsWritesIsKeptAsideBeforeItLeavesOnTermination(t *testing.T) {
	c := fencedSurplus(t)
	if err := c.terminator("a", c.stores["a"]).Terminate(ctx); err != nil {
		t.Fatalf("a's surplus copy did not leave: %v", err)
	}
	if !c.left("a") {
		t.Fatal("a's copy is still there or still listed")
	}
	if got := keptData(t, c, "a"); got != "v3-never-snapshotted" {
		t.Fatalf("the copy kept aside holds %q, want a's last write", got)
	}
}

// Without room for the copy, the surplus copy stays as it is, listed: the
// termination keeps it (a FencedWritesNotKept event says why, once), and
// the next one, with space freed, keeps it aside and leaves.
func TestWithoutRoomToKeepTheFencedWritesASurplusCopyIsNotDestroyed(t *testing.T) {
	c := fencedSurplus(t)
	store := &noSpace{SnapshotStore: c.stores["a"]}
	store.full.Store(true)
	r := c.terminator("a", store)
	if err := r.Terminate(ctx); !errors.Is(err, replica.ErrUnsafe) {
		t.Fatalf("Terminate without room for the copy: %v, want ErrUnsafe", err)
	}
	st, _ := c.state.Get(ctx, volID)
	if _, listed := st.Replica("a"); !listed || !c.holds("a", "v3-never-snapshotted") || store.tries.Load() == 0 {
		t.Fatalf("a's copy changed although its writes could not be kept (listed %v, %d tries)", listed, store.tries.Load())
	}
	if n := len(c.events.withReason("FencedWritesNotKept")); n != 1 {
		t.Fatalf("%d FencedWritesNotKept events, want 1; all: %v", n, c.events.reasons())
	}
	store.full.Store(false)
	if err := r.Terminate(ctx); err != nil {
		t.Fatalf("a's surplus copy did not leave once space was freed: %v", err)
	}
	if !c.left("a") {
		t.Fatal("a's copy is still there or still listed")
	}
	if got := keptData(t, c, "a"); got != "v3-never-snapshotted" {
		t.Fatalf("the copy kept aside holds %q, want a's last write", got)
	}
}

// A copy with a fenced term's writes that is not surplus (rf 2, and only
// the takeover's successor holds the new epoch) makes no copy aside on
// termination: the leave is refused before anything is kept.
func TestARefusedLeaveKeepsNothingAside(t *testing.T) {
	c := fencedReturn(t)
	if err := c.terminator("a", c.stores["a"]).Terminate(ctx); !errors.Is(err, replica.ErrUnsafe) {
		t.Fatalf("a left with only b holding the new epoch (rf 2): %v", err)
	}
	if r := c.events.reasons(); slices.Contains(r, "FencedWritesKept") || slices.Contains(r, "FencedWritesNotKept") || !c.holds("a", "v3-never-snapshotted") {
		t.Fatalf("events %v: a refused leave kept (or changed) the copy", r)
	}
}

// tells answers Unchanged as a pool that can tell (OpenZFS written=0).
type tells struct {
	ports.SnapshotStore
	unchanged bool
}

func (s tells) Unchanged(context.Context, volume.ID) (bool, error) { return s.unchanged, nil }

// After a handover whose new primary has not snapshotted yet (idle on
// OpenZFS, it may never), a secondary's copy ends at the snapshot the new
// primary's entry names, of the ended epoch. Where the pool tells that
// nothing was written since, it leaves keeping nothing; where it cannot
// tell (zfs-fuse, a directory), writes on top cannot be ruled out and it
// is kept aside (for nothing here: space, never data).
func TestASurplusCopyAtTheNewPrimarysSnapshotKeepsNothingWhereThePoolTellsItIsUnchanged(t *testing.T) {
	for _, c := range []struct {
		name     string
		canTell  bool
		wantKept int
	}{{"the pool tells", true, 0}, {"the pool cannot tell", false, 1}} {
		t.Run(c.name, func(t *testing.T) {
			cl := newCluster(t, 1, "a", "b")
			cl.write("a", "v1")
			cl.start("a")
			cl.start("b")
			cl.eventually("b reported a's snapshot", func() bool {
				st, _ := cl.state.Get(ctx, volID)
				a, _ := st.Replica("a")
				b, _ := st.Replica("b")
				return a.Snapshot > 0 && b.Holds() == a.Holds() && a.Holds() == cl.newestStoredSnap("a")
			})
			cl.stop("a")
			cl.stop("b")
			if _, err := cl.state.Update(ctx, volID, func(s *replica.State) error {
				a, _ := s.Replica("a")
				if err := replica.Demote(s, "a", s.Epoch, a.Holds()); err != nil {
					return err
				}
				return replica.Promote(s, "b")
			}); err != nil {
				t.Fatal(err)
			}
			var store ports.SnapshotStore = cl.stores["a"]
			if c.canTell {
				store = tells{SnapshotStore: store, unchanged: true}
			}
			if err := cl.terminator("a", store).Terminate(ctx); err != nil {
				t.Fatalf("a's surplus copy did not leave: %v", err)
			}
			if n := len(cl.events.withReason("FencedWritesKept")); n != c.wantKept || !cl.left("a") {
				t.Fatalf("%d FencedWritesKept events, want %d; left %v", n, c.wantKept, cl.left("a"))
			}
		})
	}
}
