package contract

import (
	"context"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// WatchableState is a ClusterState that can also watch.
type WatchableState interface {
	ports.ClusterState
	ports.StateWatcher
}

// RunStateWatcher runs the StateWatcher contract: a watcher is told of
// another writer's update and of a deletion, not of other volumes' writes
// once drained, and its channel closes when its context ends. newState
// returns a fresh, empty store for each case.
func RunStateWatcher(t *testing.T, newState func(t *testing.T) WatchableState) {
	t.Run("a write by anyone is notified", func(t *testing.T) {
		s := newState(t)
		id := volume.ID("watch-1")
		mustCreateState(t, s, sampleState(id))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := s.Watch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		// The watch may start with a notification (the first listing);
		// drain it, then write and expect one.
		drain(ch, 500*time.Millisecond)
		for i := 1; i <= 3; i++ {
			if _, err := s.Update(ctx, id, func(st *replica.State) error {
				st.Replicas[1].Snapshot = replica.SnapshotNumber(i)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !notified(ch, 20*time.Second) {
				t.Fatalf("write %d was not notified", i)
			}
			// A notification says "read again": the read sees the write.
			if st := mustGetState(t, s, id); st.Replicas[1].Snapshot != replica.SnapshotNumber(i) {
				t.Fatalf("after the notification of write %d Get returns snapshot %d", i, st.Replicas[1].Snapshot)
			}
		}
		if err := s.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !notified(ch, 20*time.Second) {
			t.Fatal("the deletion was not notified")
		}
	})
	t.Run("the channel closes when the context ends", func(t *testing.T) {
		s := newState(t)
		id := volume.ID("watch-2")
		mustCreateState(t, s, sampleState(id))
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := s.Watch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case _, open := <-ch:
				if !open {
					return
				}
			case <-deadline:
				t.Fatal("the channel stayed open after its context ended")
			}
		}
	})
}

// drain empties ch of what arrives within quiet of the last value.
func drain(ch <-chan struct{}, quiet time.Duration) {
	for {
		select {
		case <-ch:
		case <-time.After(quiet):
			return
		}
	}
}

func notified(ch <-chan struct{}, within time.Duration) bool {
	select {
	case _, open := <-ch:
		return open
	case <-time.After(within):
		return false
	}
}
