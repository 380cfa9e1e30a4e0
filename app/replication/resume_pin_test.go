package replication_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// resumingStore is b's store on OpenZFS: it kept an interrupted receive
// of ferry-2-3 (its resume token names that snapshot), and every receive
// is interrupted again (a long first sync over a flaky link).
type resumingStore struct {
	*memstore.Store
}

func (s resumingStore) ResumeToken(context.Context, volume.ID) (string, error) {
	return "token-of-ferry-2-3", nil
}

func (s resumingStore) Receive(_ context.Context, _ volume.ID, r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	return errors.New("stream interrupted (kept to be resumed)")
}

// recordingTransport serves a's listing and, for each fetch, remembers
// the shared state at the moment the resumed send starts.
type recordingTransport struct {
	a     *memstore.Store
	state ports.ClusterState
	mu    sync.Mutex
	seen  []replica.State
	reqs  []ports.SendRequest
}

func (t *recordingTransport) Snapshots(ctx context.Context, _ replica.Node, id volume.ID) ([]ports.SnapshotInfo, error) {
	return t.a.ListSnapshots(ctx, id)
}

func (t *recordingTransport) Fetch(ctx context.Context, _ replica.Node, req ports.SendRequest) (io.ReadCloser, error) {
	st, err := t.state.Get(ctx, req.Volume)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.seen, t.reqs = append(t.seen, st), append(t.reqs, req)
	t.mu.Unlock()
	return io.NopCloser(strings.NewReader("part of the stream")), nil
}

// A transfer longer than the retention window must converge (5.6: its
// target is kept until reported). On OpenZFS an interrupted receive is
// resumed with its token, which names the snapshot of the first attempt
// (ferry-2-3). The retry records the new plan's target (ferry-2-5) as the
// fetch target, overwriting ferry-2-3, so while the resumed transfer runs
// and after it is interrupted again, nothing keeps ferry-2-3: the sender's
// next retention destroys it, the token becomes useless and the partial
// receive is discarded; every interruption after the first starts the
// transfer over.
func TestAResumedTransferKeepsTheSnapshotItsTokenNamesPinned(t *testing.T) {
	c := newCluster(t, 1, "a", "b")
	a := c.stores["a"]
	var snaps []replica.Snap
	for n := 1; n <= 5; n++ {
		c.write("a", "v"+string(rune('0'+n)))
		info, err := a.CreateSnapshot(ctx, volID, replica.SnapshotName(replica.Snap{Number: replica.SnapshotNumber(n), Epoch: 2}), nil)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, replica.Snap{Number: replica.SnapshotNumber(n), Epoch: 2, GUID: info.GUID})
	}
	if _, err := c.state.Update(ctx, volID, func(st *replica.State) error {
		st.Epoch, st.Primary = 2, "a"
		st.Replicas = []replica.Replica{
			{Node: "a", Snapshot: 5, SnapshotEpoch: 2, SnapshotGUID: snaps[4].GUID, Active: true, Ready: true},
			// b's first attempt recorded ferry-2-3 and was interrupted.
			{Node: "b", Fetching: replica.Snap{Number: 3, Epoch: 2, GUID: snaps[2].GUID}},
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tr := &recordingTransport{a: a, state: c.state}
	r := replication.New(replication.Config{Node: "b", Volume: volID, Tick: 5 * time.Millisecond, SnapshotInterval: time.Hour, Keep: 2},
		resumingStore{c.stores["b"]}, c.state, tr, c.events, zap.NewNop())
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(rctx); close(done) }()
	c.eventually("b resumed its transfer", func() bool { tr.mu.Lock(); defer tr.mu.Unlock(); return len(tr.seen) > 0 })
	cancel()
	<-done
	tr.mu.Lock()
	st, req := tr.seen[0], tr.reqs[0]
	tr.mu.Unlock()
	if req.ResumeToken == "" {
		t.Fatalf("setup: the fetch did not resume: %+v", req)
	}
	for _, d := range replica.Retain(snaps, st, 2) {
		if d.Number == 3 {
			b, _ := st.Replica("b")
			t.Fatalf("while b resumes the transfer of ferry-2-3, a's retention destroys it: b's recorded fetch target is %v (the new plan's), the token's snapshot is pinned by nobody", b.Fetching)
		}
	}
}
