package preflight_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ferry-csi/ferry/app/preflight"
)

type report struct {
	warning bool
	reason  string
}

// A daemon whose pool is missing waits (no crash loop), says so once per
// distinct problem, backs off, and starts once the pool is there.
func TestADaemonWaitsForItsPoolAndStartsOnceItIsThere(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	clock := time.Unix(0, 0)
	var waits []time.Duration
	tries := 0
	var reports []report
	w := preflight.Waiter{
		What: "pool tank on node-a", Initial: time.Second, Max: 4 * time.Second, Log: zap.New(core),
		Check: func(context.Context) error {
			tries++
			switch {
			case tries <= 3:
				return errors.New("pool tank: not found")
			case tries <= 5:
				return errors.New("parent dataset tank/ferry: permission denied")
			}
			return nil
		},
		Report: func(_ context.Context, warning bool, reason, _ string) {
			reports = append(reports, report{warning, reason})
		},
		After: func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			clock = clock.Add(d)
			c := make(chan time.Time, 1)
			c <- clock
			return c
		},
		Now: func() time.Time { return clock },
	}
	if err := w.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tries != 6 {
		t.Errorf("checked %d times, want 6", tries)
	}
	if want := []time.Duration{1, 2, 4, 4, 4}; len(waits) != len(want) {
		t.Errorf("waits %v", waits)
	} else {
		for i := range want {
			if waits[i] != want[i]*time.Second {
				t.Errorf("wait %d: %v, want %v (backing off to Max)", i, waits[i], want[i]*time.Second)
			}
		}
	}
	// Two distinct problems said, then the all-clear.
	want := []report{{true, preflight.ReasonWaiting}, {true, preflight.ReasonWaiting}, {false, preflight.ReasonFound}}
	if len(reports) != len(want) {
		t.Fatalf("reports %+v, want %+v", reports, want)
	}
	for i := range want {
		if reports[i] != want[i] {
			t.Errorf("report %d: %+v, want %+v", i, reports[i], want[i])
		}
	}
	if n := logs.FilterMessageSnippet("waits for pool tank on node-a").Len(); n != 2 {
		t.Errorf("%d warnings logged, want one per distinct problem (2)", n)
	}
	if logs.FilterMessageSnippet("the daemon starts").Len() != 1 {
		t.Error("the start after the wait is not logged")
	}
}

// A pool that is there costs one check and says nothing; a SIGTERM while
// waiting ends the wait.
func TestAPoolThatIsThereIsSilentAndAStopEndsTheWait(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	w := preflight.Waiter{What: "pool tank", Initial: time.Second, Max: time.Minute, Log: zap.New(core),
		Check: func(context.Context) error { return nil }}
	if err := w.Wait(context.Background()); err != nil || logs.Len() != 0 {
		t.Fatalf("err %v, %d log lines", err, logs.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.Check = func(context.Context) error { return errors.New("pool tank: not found") }
	w.After = func(time.Duration) <-chan time.Time { cancel(); return make(chan time.Time) }
	if err := w.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a stop while waiting: %v, want context.Canceled", err)
	}
	if !strings.Contains(logs.All()[0].Message, "node selector") {
		t.Errorf("the warning does not say what to do: %q", logs.All()[0].Message)
	}
}
