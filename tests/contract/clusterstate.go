package contract

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// RunClusterState runs the ClusterState contract against newState, which
// returns a fresh, empty store for each case. Only the port is used, so the
// in-memory fake and the Kubernetes adapter run the same cases.
//
// The suite never requires a write whose fn changed nothing to get a new
// version: the API server skips such no-op updates.
func RunClusterState(t *testing.T, newState func(t *testing.T) ports.ClusterState) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s ports.ClusterState)
	}{
		{"a created state is read back with a version", createdStateIsReadBack},
		{"a state handed out is a copy the caller may change", statesAreCopies},
		{"creating twice answers ErrExists and keeps the first", createStateTwiceIsErrExists},
		{"a missing state answers ErrNotFound from Get, Update and Delete", missingStateIsErrNotFound},
		{"an update that returns an error writes nothing", failedUpdateWritesNothing},
		{"an update's version changes on every write", versionChangesOnEveryWrite},
		{"an invalid state is refused and nothing is written", invalidStateIsRefused},
		{"an update may not change the replication factor", replicationFactorIsSpec},
		{"a deleted state is gone and can be created again", deletedStateIsGone},
		{"a deleted state stays, Deleting, until its last replica left", deletionWaitsForEveryReplica},
		{"concurrent updates from many goroutines lose no increment", concurrentUpdatesLoseNothing},
		{"two deciders cannot both remove the last copy", twoDecidersKeepTheLastCopy},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newState(t)) })
	}
}

// sampleState is a valid state: an active primary on a, a lagging copy on b.
func sampleState(id volume.ID) replica.State {
	return replica.State{
		Volume: id, ReplicationFactor: 2, Epoch: 3, Primary: "a",
		Replicas: []replica.Replica{
			{Node: "a", Snapshot: 5, SnapshotEpoch: 3, Active: true, Ready: true},
			{Node: "b", Snapshot: 4, SnapshotEpoch: 3},
		},
	}
}

func mustCreateState(t *testing.T, s ports.ClusterState, st replica.State) replica.State {
	t.Helper()
	created, err := s.Create(ctx, st)
	if err != nil {
		t.Fatalf("Create(%s): %v", st.Volume, err)
	}
	return created
}

func mustGetState(t *testing.T, s ports.ClusterState, id volume.ID) replica.State {
	t.Helper()
	got, err := s.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return got
}

// sameState compares everything but Version; a nil and an empty replica
// list are the same (a decoder may produce either).
func sameState(a, b replica.State) bool {
	a.Version, b.Version = "", ""
	return slices.Equal(a.Replicas, b.Replicas) &&
		a.Volume == b.Volume && a.ReplicationFactor == b.ReplicationFactor &&
		a.Epoch == b.Epoch && a.Primary == b.Primary
}

// without returns rs minus node's entry, in a new slice: fn may run again
// on another copy and must not rely on its argument's backing array.
func without(rs []replica.Replica, node replica.Node) []replica.Replica {
	var out []replica.Replica
	for _, r := range rs {
		if r.Node != node {
			out = append(out, r)
		}
	}
	return out
}

func createdStateIsReadBack(t *testing.T, s ports.ClusterState) {
	want := sampleState("vol-a")
	created := mustCreateState(t, s, want)
	if created.Version == "" || !sameState(created, want) {
		t.Fatalf("Create returned %+v, want %+v with a version", created, want)
	}
	got := mustGetState(t, s, "vol-a")
	if !sameState(got, want) || got.Version != created.Version {
		t.Fatalf("Get returned %+v, want %+v", got, created)
	}
}

func statesAreCopies(t *testing.T, s ports.ClusterState) {
	created := mustCreateState(t, s, sampleState("vol-a"))
	created.Replicas[0].Snapshot = 99
	got := mustGetState(t, s, "vol-a")
	got.Replicas[1].Snapshot = 98
	updated, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
		st.Epoch++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	updated.Replicas[1].Ready = true
	want := sampleState("vol-a")
	want.Epoch++
	if got := mustGetState(t, s, "vol-a"); !sameState(got, want) {
		t.Fatalf("changing returned states changed the stored one: %+v, want %+v", got, want)
	}
}

func createStateTwiceIsErrExists(t *testing.T, s ports.ClusterState) {
	first := mustCreateState(t, s, sampleState("vol-a"))
	second := sampleState("vol-a")
	second.ReplicationFactor = 3
	_, err := s.Create(ctx, second)
	wantErr(t, "second Create", err, ports.ErrExists)
	if got := mustGetState(t, s, "vol-a"); !sameState(got, first) || got.Version != first.Version {
		t.Fatalf("the first state changed: %+v, want %+v", got, first)
	}
}

func missingStateIsErrNotFound(t *testing.T, s ports.ClusterState) {
	_, err := s.Get(ctx, "nope")
	wantErr(t, "Get", err, ports.ErrNotFound)
	ran := false
	_, err = s.Update(ctx, "nope", func(*replica.State) error { ran = true; return nil })
	wantErr(t, "Update", err, ports.ErrNotFound)
	if ran {
		t.Error("Update ran fn without a state to give it")
	}
	wantErr(t, "Delete", s.Delete(ctx, "nope"), ports.ErrNotFound)
	_, err = s.Get(ctx, "nope")
	wantErr(t, "Get after Update of a missing state", err, ports.ErrNotFound)
}

func failedUpdateWritesNothing(t *testing.T, s ports.ClusterState) {
	before := mustCreateState(t, s, sampleState("vol-a"))
	errStop := errors.New("decided not to")
	_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
		st.Replicas[1].Snapshot = 5 // changed, then abandoned
		st.ReplicationFactor = 1
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Update returned %v, want fn's error %v", err, errStop)
	}
	if got := mustGetState(t, s, "vol-a"); !sameState(got, before) || got.Version != before.Version {
		t.Fatalf("an aborted update wrote %+v, want %+v", got, before)
	}
}

func versionChangesOnEveryWrite(t *testing.T, s ports.ClusterState) {
	created := mustCreateState(t, s, sampleState("vol-a"))
	seen := map[string]bool{created.Version: true}
	for i := 1; i <= 5; i++ {
		updated, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
			st.Replicas[1].Snapshot++
			st.Version = "made-up" // the store sets versions, whatever fn says
			return nil
		})
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
		if seen[updated.Version] || updated.Version == "made-up" || updated.Version == "" {
			t.Fatalf("update %d got version %q, already seen or not the store's: %v", i, updated.Version, seen)
		}
		seen[updated.Version] = true
		got := mustGetState(t, s, "vol-a")
		if got.Version != updated.Version || got.Replicas[1].Snapshot != replica.SnapshotNumber(4+i) {
			t.Fatalf("after update %d: Get = %+v, Update returned %+v", i, got, updated)
		}
	}
}

func invalidStateIsRefused(t *testing.T, s ports.ClusterState) {
	bad := sampleState("vol-a")
	bad.Replicas[1].Active = true // two active replicas
	_, err := s.Create(ctx, bad)
	wantErr(t, "Create of an invalid state", err, ports.ErrInvalid)
	_, err = s.Get(ctx, "vol-a")
	wantErr(t, "Get after a refused Create", err, ports.ErrNotFound)

	before := mustCreateState(t, s, sampleState("vol-a"))
	_, err = s.Update(ctx, "vol-a", func(st *replica.State) error {
		st.Replicas[1].Active = true
		return nil
	})
	wantErr(t, "Update to an invalid state", err, ports.ErrInvalid)
	if got := mustGetState(t, s, "vol-a"); !sameState(got, before) || got.Version != before.Version {
		t.Fatalf("a refused update wrote %+v, want %+v", got, before)
	}
}

func replicationFactorIsSpec(t *testing.T, s ports.ClusterState) {
	before := mustCreateState(t, s, sampleState("vol-a"))
	_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
		st.ReplicationFactor = 3
		return nil
	})
	wantErr(t, "Update changing the replication factor", err, ports.ErrInvalid)
	if got := mustGetState(t, s, "vol-a"); !sameState(got, before) || got.Version != before.Version {
		t.Fatalf("a refused update wrote %+v, want %+v", got, before)
	}
}

func deletedStateIsGone(t *testing.T, s ports.ClusterState) {
	// A state listing no replica goes at once.
	mustCreateState(t, s, replica.State{Volume: "vol-a", ReplicationFactor: 1})
	if err := s.Delete(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, "vol-a")
	wantErr(t, "Get after Delete", err, ports.ErrNotFound)
	wantErr(t, "second Delete", s.Delete(ctx, "vol-a"), ports.ErrNotFound)
	mustCreateState(t, s, sampleState("vol-a"))
}

// A state listing replicas is marked Deleting and stays until the last
// replica left: the Update removing it removes the state.
func deletionWaitsForEveryReplica(t *testing.T, s ports.ClusterState) {
	mustCreateState(t, s, sampleState("vol-a"))
	if err := s.Delete(ctx, "vol-a"); err != nil {
		t.Fatal(err)
	}
	st := mustGetState(t, s, "vol-a")
	if !st.Deleting || len(st.Replicas) != 2 {
		t.Fatalf("after Delete the state reads %+v, want Deleting with both replicas", st)
	}
	if err := s.Delete(ctx, "vol-a"); err != nil {
		t.Fatalf("deleting a state being deleted: %v", err)
	}
	_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
		st.Deleting = false
		return nil
	})
	wantErr(t, "Update undoing the deletion", err, ports.ErrInvalid)
	leave := func(n replica.Node) error {
		_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
			_, err := replica.Leave(st, n, replica.Holding{Newest: replica.Snap{Number: 5, Epoch: 3}, HasData: true}, true)
			return err
		})
		return err
	}
	if err := leave("b"); err != nil {
		t.Fatal(err)
	}
	if st := mustGetState(t, s, "vol-a"); !st.Deleting || len(st.Replicas) != 1 {
		t.Fatalf("after one of two replicas left the state reads %+v", st)
	}
	if err := leave("a"); err != nil {
		t.Fatalf("the last replica (the active primary) of a volume being deleted could not leave: %v", err)
	}
	_, err = s.Get(ctx, "vol-a")
	wantErr(t, "Get after the last replica left", err, ports.ErrNotFound)
	mustCreateState(t, s, sampleState("vol-a"))
}

// concurrentUpdatesLoseNothing has many goroutines increment one counter
// through Update. A store may give up with ErrConflict after bounded
// retries; the caller then retries itself, as the use cases do, so every
// increment must land exactly once: none lost, none doubled by a write that
// reported a conflict.
func concurrentUpdatesLoseNothing(t *testing.T, s ports.ClusterState) {
	const workers, each, patience = 16, 25, 100
	mustCreateState(t, s, replica.State{Volume: "vol-a", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "a"}}})
	increment := func(st *replica.State) error {
		i := slices.IndexFunc(st.Replicas, func(r replica.Replica) bool { return r.Node == "a" })
		if i < 0 {
			return errors.New("replica a vanished")
		}
		st.Replicas[i].Snapshot++
		st.Replicas[i].SnapshotEpoch = 1
		return nil
	}
	var successes, conflicts atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range workers {
		wg.Go(func() {
			<-start
			for range each {
				for try := 0; ; try++ {
					_, err := s.Update(ctx, "vol-a", increment)
					if err == nil {
						successes.Add(1)
						break
					}
					if !errors.Is(err, ports.ErrConflict) || try == patience {
						t.Errorf("Update: %v (after %d conflicts)", err, try)
						return
					}
					conflicts.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	final := mustGetState(t, s, "vol-a")
	got, _ := final.Replica("a")
	if got.Snapshot != workers*each || successes.Load() != workers*each {
		t.Fatalf("counter = %d after %d successful updates, want %d", got.Snapshot, successes.Load(), workers*each)
	}
	t.Logf("%d updates gave up with ErrConflict and were retried by the caller", conflicts.Load())
}

// twoDecidersKeepTheLastCopy races the safe-deletion rule: with
// replicationFactor 1, a and b each see the other holding snapshot 5 and
// may leave, but not both. Each fn waits, on its first run, until both
// have read the state, so both verdicts are computed on the same version
// and only the compare-and-swap can stop the second removal. A store that
// serialises fn calls cannot meet there; the wait then times out and the
// case still checks the outcome.
func twoDecidersKeepTheLastCopy(t *testing.T, s ports.ClusterState) {
	mustCreateState(t, s, replica.State{Volume: "vol-a", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{
		{Node: "a", Snapshot: 5, SnapshotEpoch: 1, Ready: true},
		{Node: "b", Snapshot: 5, SnapshotEpoch: 1, Ready: true},
	}})
	errRefused := errors.New("safe-deletion rule refused")
	var read atomic.Int32
	bothRead := make(chan struct{})
	leave := func(self replica.Node) error {
		first := true
		_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
			if first {
				first = false
				if read.Add(1) == 2 {
					close(bothRead)
				}
				select {
				case <-bothRead:
				case <-time.After(2 * time.Second):
				}
			}
			if v := replica.CanDestroy(*st, self, false); !v.Allowed {
				return errRefused
			}
			st.Replicas = without(st.Replicas, self)
			return nil
		})
		return err
	}

	nodes := []replica.Node{"a", "b"}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, n := range nodes {
		wg.Go(func() { <-start; errs[i] = leave(n) })
	}
	close(start)
	wg.Wait()

	var winner, loser int
	switch {
	case errs[0] == nil && errs[1] != nil:
		winner, loser = 0, 1
	case errs[1] == nil && errs[0] != nil:
		winner, loser = 1, 0
	default:
		t.Fatalf("want exactly one replica to leave; a: %v, b: %v", errs[0], errs[1])
	}
	if !errors.Is(errs[loser], errRefused) {
		t.Errorf("%s: got %v, want the rule's refusal on the fresh state", nodes[loser], errs[loser])
	}
	got := mustGetState(t, s, "vol-a")
	if len(got.Replicas) != 1 || got.Replicas[0].Node != nodes[loser] {
		t.Fatalf("replicas after %s left: %+v, want only %s", nodes[winner], got.Replicas, nodes[loser])
	}
}
