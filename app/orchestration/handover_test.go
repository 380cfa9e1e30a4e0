package orchestration

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
)

// nextDaemons answers from a script, one answer per read, the last kept.
type nextDaemons struct {
	mu      sync.Mutex
	answers []liveness.NextDaemon
	errs    []error
	reads   int
}

func (n *nextDaemons) NextDaemon(context.Context) (liveness.NextDaemon, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := min(n.reads, len(n.answers)-1)
	n.reads++
	return n.answers[i], n.errs[i]
}

// blockingNext never answers until its context ends.
type blockingNext struct{}

func (blockingNext) NextDaemon(ctx context.Context) (liveness.NextDaemon, error) {
	<-ctx.Done()
	return liveness.NextDaemon{}, ctx.Err()
}

// A stopping daemon whose successor is still pulling keeps the node and
// returns once the successor's daemon has started; with none it returns
// at once; a read that fails is tried again.
func TestAStoppingDaemonHandsItsNodeOverOnlyOnceTheNextHasStarted(t *testing.T) {
	pulling := liveness.NextDaemon{Deleting: true, Grace: time.Hour, Found: true, Pod: "new"}
	started := liveness.NextDaemon{Deleting: true, Grace: time.Hour, Found: true, Pod: "new", Running: true}
	cfg := HandoverConfig{Poll: time.Millisecond, Margin: time.Second, Unread: time.Hour, Absent: time.Millisecond}
	n := &nextDaemons{answers: []liveness.NextDaemon{{}, pulling, pulling, started}, errs: []error{errors.New("apiserver away"), nil, nil, nil}}
	HandOver(context.Background(), cfg, n, time.Now(), time.Now, zap.NewNop())
	if n.reads != 4 {
		t.Errorf("returned after %d reads, want 4 (unreadable, pulling, pulling, started)", n.reads)
	}
	// A read that does not answer is cut short, and the stop does not
	// wait past Unread for a first answer.
	stuck := blockingNext{}
	start := time.Now()
	HandOver(context.Background(), HandoverConfig{Poll: time.Millisecond, ReadTimeout: 20 * time.Millisecond, Unread: 100 * time.Millisecond}, stuck, time.Now(), time.Now, zap.NewNop())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("an API server that never answers held the stop %s", took)
	}
	gone := &nextDaemons{answers: []liveness.NextDaemon{{Gone: true}}, errs: []error{nil}}
	HandOver(context.Background(), cfg, gone, time.Now(), time.Now, zap.NewNop())
	if gone.reads != 1 {
		t.Errorf("the own pod gone: %d reads, want 1", gone.reads)
	}
	// A second signal ends the wait.
	ctx, cancel := context.WithCancel(context.Background())
	forever := &nextDaemons{answers: []liveness.NextDaemon{pulling}, errs: []error{nil}}
	done := make(chan struct{})
	go func() { HandOver(ctx, cfg, forever, time.Now(), time.Now, zap.NewNop()); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not end with its context")
	}
}
