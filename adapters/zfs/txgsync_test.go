package zfs

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// A caller arriving while a sync runs cannot use it (that sync may have
// started before the caller's read); callers arriving together share the
// next one.
func TestAPoolSyncIsSharedOnlyByCallersThatArrivedBeforeItStarted(t *testing.T) {
	p := newPoolSync()
	var runs atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	run := func(context.Context) error {
		if runs.Add(1) == 1 {
			close(first)
			<-release // the first sync is held until the others wait
		}
		return nil
	}
	ctx := context.Background()
	done := make(chan struct{})
	go func() { p.after(ctx, run); close(done) }()
	<-first
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); p.after(ctx, run) }()
	}
	// All eight wait on the running sync before it is released.
	for {
		p.mu.Lock()
		n := p.waiters
		p.mu.Unlock()
		if n == 8 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	<-done
	if got := runs.Load(); got != 2 {
		t.Fatalf("%d syncs; want 2 (the running one, then one shared by the eight that arrived during it)", got)
	}
}

func TestAPoolSyncsErrorReachesItsCallers(t *testing.T) {
	p := newPoolSync()
	boom := errors.New("boom")
	if err := p.after(context.Background(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v; want boom", err)
	}
	if err := p.after(context.Background(), func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a later good sync: err = %v", err)
	}
}
