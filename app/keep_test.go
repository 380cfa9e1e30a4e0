package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// fencedReturn: a snapshots v2 that b never receives, is lost, writes v3
// after its last snapshot (never snapshotted); b takes over in a new epoch
// and snapshots. a's volume manager is not running when it returns.
func fencedReturn(t *testing.T) *cluster {
	c := newCluster(t, 2, "a", "b")
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
	if _, err := c.state.Update(ctx, volID, func(s *replica.State) error { return ackThenTakeover(s, "b", "a", 1) }); err != nil {
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
