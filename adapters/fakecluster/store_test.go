package fakecluster_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
)

func TestFakeClusterHonoursTheClusterStateContract(t *testing.T) {
	contract.RunClusterState(t, func(t *testing.T) ports.ClusterState { return fakecluster.New() })
}

func twoReplicas(s *fakecluster.Store, t *testing.T) {
	t.Helper()
	_, err := s.Create(t.Context(), replica.State{Volume: "vol-a", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// interloper returns a BeforeWrite hook that, the first n times a pending
// write is about to compare, lands another Update first. Its own Update
// passes through the hook too; busy keeps that from recursing.
func interloper(t *testing.T, s *fakecluster.Store, n int, change func(*replica.State) error) func() {
	busy := false
	return func() {
		if busy || n == 0 {
			return
		}
		busy, n = true, n-1
		defer func() { busy = false }()
		if _, err := s.Update(t.Context(), "vol-a", change); err != nil {
			t.Errorf("interloping update: %v", err)
		}
	}
}

func TestAWriteBetweenReadAndCompareMakesUpdateRunFnAgain(t *testing.T) {
	s := fakecluster.New()
	twoReplicas(s, t)
	s.BeforeWrite(interloper(t, s, 1, func(st *replica.State) error {
		st.Replicas[1].Snapshot = 7
		return nil
	}))
	runs := 0
	got, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error {
		runs++
		st.Replicas[0].Snapshot = 9
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2: once on the stale state, once on the fresh one", runs)
	}
	if got.Replicas[0].Snapshot != 9 || got.Replicas[1].Snapshot != 7 {
		t.Fatalf("final replicas %+v, want a at 9 and b at 7: both writes kept", got.Replicas)
	}
}

func TestUpdateGivesUpWithErrConflictWhenEveryAttemptLoses(t *testing.T) {
	s := fakecluster.New()
	twoReplicas(s, t)
	s.BeforeWrite(interloper(t, s, 1000, func(st *replica.State) error {
		st.Epoch++
		return nil
	}))
	runs := 0
	_, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error {
		runs++
		st.Replicas[0].Snapshot = 9
		return nil
	})
	if !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	if runs != 16 {
		t.Fatalf("fn ran %d times, want the bound of 16", runs)
	}
	s.BeforeWrite(nil)
	if got, _ := s.Get(t.Context(), "vol-a"); got.Replicas[0].Snapshot != 1 || got.Epoch != 17 {
		t.Fatalf("state %+v: want only the interloper's 16 writes", got)
	}
}

func TestACancelledContextStopsUpdateBetweenAttempts(t *testing.T) {
	s := fakecluster.New()
	twoReplicas(s, t)
	ctx, cancel := context.WithCancel(t.Context())
	inner := interloper(t, s, 1, func(st *replica.State) error { st.Epoch++; return nil })
	s.BeforeWrite(func() { inner(); cancel() })
	runs := 0
	_, err := s.Update(ctx, "vol-a", func(*replica.State) error { runs++; return nil })
	if !errors.Is(err, context.Canceled) || runs != 1 {
		t.Fatalf("got %v after %d runs, want context.Canceled after 1", err, runs)
	}
}

func TestAnUpdateMayNotRenameTheVolume(t *testing.T) {
	s := fakecluster.New()
	twoReplicas(s, t)
	_, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error { st.Volume = "vol-b"; return nil })
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if _, err := s.Get(t.Context(), "vol-b"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("renamed state was written: %v", err)
	}
}

func TestFakeClusterStateHonoursTheStateWatcherContract(t *testing.T) {
	contract.RunStateWatcher(t, func(t *testing.T) contract.WatchableState { return fakecluster.New() })
}
