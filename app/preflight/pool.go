// Package preflight holds a node daemon back until what it needs on its
// node is there, instead of failing: a node without Ferry's pool (not
// created yet, not imported after a boot, a node the DaemonSet should not
// have selected) is a daemon that waits, says why in its log and in an
// event on its Node, and starts by itself once the pool appears. A crash
// loop would say less and restart the sidecars' waits over and over.
//
// Until it starts the daemon registers nothing with the kubelet, so the
// node carries no topology label of the driver and no volume is placed
// there.
package preflight

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Check looks once at what the daemon needs (its pool; the parent
// dataset is the store's Open, once the pool is there): nil when it may
// start.
type Check func(ctx context.Context) error

// Report tells an operator where they look (an event on the node);
// warning is false for the all-clear after a wait.
type Report func(ctx context.Context, warning bool, reason, message string)

// Reasons of the reports.
const (
	ReasonWaiting = "FerryPoolMissing"
	ReasonFound   = "FerryPoolFound"
)

// Waiter runs Check until it passes, backing off from Initial to Max
// between tries.
type Waiter struct {
	Check  Check
	Report Report // nil: the log alone
	Log    *zap.Logger
	// What is awaited, for the messages ("pool tank on node-a").
	What         string
	Initial, Max time.Duration
	// After is time.After (a test's clock otherwise).
	After func(time.Duration) <-chan time.Time
	// Now is time.Now (a test's clock otherwise).
	Now func() time.Time
}

// Wait returns nil once Check passes, or ctx's error when ctx ends first
// (a SIGTERM while waiting). A failure is logged and reported when it
// first happens, when its message changes and every RemindEvery while it
// lasts, not at every try.
func (w Waiter) Wait(ctx context.Context) error {
	after, now := w.After, w.Now
	if after == nil {
		after = time.After
	}
	if now == nil {
		now = time.Now
	}
	delay := w.Initial
	start := now()
	var said string
	var saidAt time.Time
	for {
		err := w.Check(ctx)
		if err == nil {
			if said != "" {
				msg := w.What + " is there: the daemon starts (it waited " + now().Sub(start).Round(time.Second).String() + ")"
				w.Log.Info(msg)
				if w.Report != nil {
					w.Report(ctx, false, ReasonFound, msg)
				}
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if msg := err.Error(); msg != said || now().Sub(saidAt) >= RemindEvery {
			said, saidAt = msg, now()
			text := "the daemon waits for " + w.What + " and starts once it is there (create or import the pool, or keep Ferry off this node with the DaemonSet's node selector): " + msg
			w.Log.Warn(text, zap.Duration("retryIn", delay), zap.Duration("waited", now().Sub(start).Round(time.Second)))
			if w.Report != nil {
				w.Report(ctx, true, ReasonWaiting, text)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-after(delay):
		}
		delay = min(2*delay, w.Max)
	}
}

// RemindEvery is how often a wait that goes on is said again.
const RemindEvery = 10 * time.Minute
