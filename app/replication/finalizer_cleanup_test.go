package replication_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// failingUpdates: the API server refuses the next writes.
type failingUpdates struct {
	*fakecluster.Store
	fails atomic.Int32
}

func (f *failingUpdates) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	if f.fails.Add(-1) >= 0 {
		return replica.State{}, fmt.Errorf("apiserver unavailable: %w", ports.ErrUnavailable)
	}
	return f.Store.Update(ctx, id, fn)
}

// From a review: a replica of a volume being deleted destroys its copy,
// then removes its entry; if that write fails, the entry must still go
// (else the volume's object waits for ever, its finalizer held by an
// entry whose copy no longer exists). The volume manager keeps running
// while the volume is deleted (its pods stay until the object goes) and
// retries.
func TestAnEntryWhoseCopyWasDestroyedIsRemovedOnceTheAPIAnswers(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.write("a", "v1")
	c.start("a")
	c.start("b")
	c.eventually("b holds v1", func() bool { return c.holds("b", "v1") })
	c.stop("b")
	flaky := &failingUpdates{Store: c.state}
	flaky.fails.Store(1 << 30) // nothing is written until the API is back
	_ = c.runIdle("b", flaky, c.stores["b"])
	if err := c.state.Delete(ctx, volID); err != nil {
		t.Fatal(err)
	}
	c.eventually("b destroyed its copy", func() bool {
		_, err := c.stores["b"].GetVolume(ctx, volID)
		return errors.Is(err, ports.ErrNotFound)
	})
	if st, err := c.state.Get(ctx, volID); err != nil {
		t.Fatal(err)
	} else if _, listed := st.Replica("b"); !listed {
		t.Fatal("b's entry went although no write succeeded")
	}
	flaky.fails.Store(2) // the API answers again, after two more failures
	c.eventually("b's entry removed and, with a's, the state gone", func() bool {
		_, err := c.state.Get(ctx, volID)
		return errors.Is(err, ports.ErrNotFound)
	})
}
