package main

import (
	"context"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/fx"
)

// On the first signal a daemon holds (the whole application running, its
// stop hooks not run) until the hold returns or a second signal cuts it
// short; then it stops.
func TestASignalHoldsTheDaemonUntilItsHoldEndsThenStopsIt(t *testing.T) {
	var stopped atomic.Bool
	app := fx.New(fx.NopLogger, fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{OnStop: func(context.Context) error { stopped.Store(true); return nil }})
	}))
	held, cut := make(chan struct{}), make(chan struct{})
	sent := time.Now().Add(-time.Minute) // a signal that waited for the start
	var since time.Time
	hold := func(ctx context.Context, s time.Time) {
		since = s
		close(held)
		<-ctx.Done()
		close(cut)
	}
	sig := make(chan arrival, 2)
	done := make(chan int, 1)
	go func() { done <- runApp(app, 5*time.Second, io.Discard, hold, sig) }()
	sig <- arrival{syscall.SIGTERM, sent}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first signal did not start the hold")
	}
	if !since.Equal(sent) {
		t.Errorf("the hold counts from %v, not from the signal's arrival %v", since, sent)
	}
	// The hold is blocked on its context: nothing may have stopped.
	if stopped.Load() {
		t.Fatal("the application stopped while holding")
	}
	select {
	case code := <-done:
		t.Fatalf("runApp returned %d while holding", code)
	default:
	}
	sig <- arrival{syscall.SIGTERM, time.Now()}
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("a second signal did not cut the hold short")
	}
	if code := <-done; code != 0 || !stopped.Load() {
		t.Fatalf("after the hold: code %d, stopped %v", code, stopped.Load())
	}
}

// Without a hold the first signal stops it.
func TestWithoutAHoldASignalStopsAtOnce(t *testing.T) {
	var stopped atomic.Bool
	app := fx.New(fx.NopLogger, fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{OnStop: func(context.Context) error { stopped.Store(true); return nil }})
	}))
	sig := make(chan arrival, 1)
	done := make(chan int, 1)
	go func() { done <- runApp(app, 5*time.Second, io.Discard, nil, sig) }()
	sig <- arrival{syscall.SIGTERM, time.Now()}
	select {
	case code := <-done:
		if code != 0 || !stopped.Load() {
			t.Fatalf("code %d, stopped %v", code, stopped.Load())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a signal did not stop it")
	}
}
