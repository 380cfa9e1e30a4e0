package replication_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/app/replication"
)

// fakeClock stands still until Sleep or the test moves it: the limiter's
// arithmetic is checked without wall-clock timing luck.
type fakeClock struct {
	now    time.Time
	slept  time.Duration
	sleeps int
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	c.slept += d
	c.sleeps++
	return nil
}

// pacedWriter checks, at every write, that no more has arrived than the
// rate allows since the start plus one burst.
type pacedWriter struct {
	t           *testing.T
	clock       *fakeClock
	start       time.Time
	rate, burst float64
	got         int64
	largest     int
}

func (w *pacedWriter) Write(b []byte) (int, error) {
	w.got += int64(len(b))
	w.largest = max(w.largest, len(b))
	if allowed := w.burst + w.rate*w.clock.now.Sub(w.start).Seconds(); float64(w.got) > allowed+1 {
		w.t.Fatalf("%d bytes delivered after %s: more than %.0f (rate %.0f/s, burst %.0f)", w.got, w.clock.now.Sub(w.start), allowed, w.rate, w.burst)
	}
	return len(b), nil
}

// readerOnly hides a reader's WriteTo, so the limiter's Read path runs.
type readerOnly struct{ r io.Reader }

func (r readerOnly) Read(p []byte) (int, error) { return r.r.Read(p) }

// writerToSource is a source with its own WriteTo (as the peer stream has)
// that hands over its data in writes of chunk bytes.
type writerToSource struct {
	data   []byte
	chunk  int
	called bool
}

func (s *writerToSource) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

func (s *writerToSource) WriteTo(w io.Writer) (int64, error) {
	s.called = true
	var total int64
	for len(s.data) > 0 {
		n, err := w.Write(s.data[:min(s.chunk, len(s.data))])
		total += int64(n)
		s.data = s.data[n:]
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

const mib = 1 << 20

// wantElapsed is how long size bytes take at rate, the first burst free.
func wantElapsed(size, rate, burst int64) time.Duration {
	return time.Duration(float64(size-burst) / float64(rate) * float64(time.Second))
}

func closeTo(got, want time.Duration) bool {
	return math.Abs(float64(got-want)) < float64(time.Millisecond)
}

func TestLimitReaderDeliversAtMostTheRateThroughReadAndThroughWriteTo(t *testing.T) {
	const rate, size = 1 * mib, 10 * mib
	const burst = rate / 16 // a sixteenth of a second's worth
	for _, tc := range []struct {
		name string
		src  func([]byte) io.Reader
		copy func(io.Writer, io.Reader) (int64, error)
	}{
		{"Read, small buffers", func(b []byte) io.Reader { return readerOnly{bytes.NewReader(b)} }, func(w io.Writer, r io.Reader) (int64, error) {
			return io.CopyBuffer(w, readerOnly{r}, make([]byte, 7000))
		}},
		{"Read, buffers larger than the burst", func(b []byte) io.Reader { return readerOnly{bytes.NewReader(b)} }, func(w io.Writer, r io.Reader) (int64, error) {
			return io.CopyBuffer(w, readerOnly{r}, make([]byte, 3*mib))
		}},
		{"WriteTo of the source, 1 MiB chunks", func(b []byte) io.Reader { return &writerToSource{data: b, chunk: mib} }, io.Copy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			w := &pacedWriter{t: t, clock: clock, start: clock.now, rate: rate, burst: burst}
			r := replication.LimitReader(context.Background(), tc.src(make([]byte, size)), rate, clock)
			n, err := tc.copy(w, r)
			if err != nil || n != size {
				t.Fatalf("copied %d, %v; want %d", n, err, size)
			}
			if want := wantElapsed(size, rate, burst); !closeTo(clock.slept, want) {
				t.Errorf("slept %s in all, want %s (the first burst free, then the rate)", clock.slept, want)
			}
			if w.largest > burst {
				t.Errorf("a piece of %d bytes went through at once, more than the burst %d", w.largest, burst)
			}
		})
	}
}

func TestLimitReaderKeepsTheSourcesWriteTo(t *testing.T) {
	src := &writerToSource{data: make([]byte, 3*mib), chunk: mib}
	if _, err := io.Copy(io.Discard, replication.LimitReader(context.Background(), src, 100*mib, newFakeClock())); err != nil {
		t.Fatal(err)
	}
	if !src.called {
		t.Error("the source's WriteTo was bypassed: the peer stream's zero-copy path would be lost")
	}
}

func TestLimitReaderNeverSleepsForASourceSlowerThanTheRate(t *testing.T) {
	clock := newFakeClock()
	// The source delivers 64 KiB every 125 ms: 512 KiB/s, half the limit.
	src := readerFunc(func(p []byte) (int, error) {
		clock.now = clock.now.Add(125 * time.Millisecond)
		return min(len(p), 64<<10), nil
	})
	r := replication.LimitReader(context.Background(), src, 1*mib, clock)
	buf := make([]byte, 64<<10)
	for i := 0; i < 100; i++ {
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if clock.sleeps != 0 {
		t.Errorf("slept %d times (%s) for a source slower than the limit", clock.sleeps, clock.slept)
	}
}

func TestLimitReaderBanksNoMoreThanOneBurstWhileIdle(t *testing.T) {
	const rate, size = 2 * mib, 4 * mib
	const burst = rate / 16
	clock := newFakeClock()
	r := replication.LimitReader(context.Background(), readerOnly{bytes.NewReader(make([]byte, 2*size))}, rate, clock)
	if _, err := io.CopyN(io.Discard, r, size); err != nil {
		t.Fatal(err)
	}
	clock.now = clock.now.Add(time.Hour) // an idle hour earns one burst, not an hour's worth
	before := clock.slept
	if _, err := io.CopyN(io.Discard, r, size); err != nil {
		t.Fatal(err)
	}
	if got, want := clock.slept-before, wantElapsed(size, rate, burst); !closeTo(got, want) {
		t.Errorf("after an idle hour, %d bytes took %s of sleep, want %s", size, got, want)
	}
}

func TestLimitReaderStopsWaitingWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := newFakeClock()
	r := replication.LimitReader(ctx, readerOnly{bytes.NewReader(make([]byte, 10*mib))}, 1*mib, clock)
	if _, err := io.CopyN(io.Discard, r, 1*mib); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read waiting for the rate after cancel: %v, want context.Canceled", err)
	}
	src := &writerToSource{data: make([]byte, 10*mib), chunk: mib}
	if _, err := io.Copy(io.Discard, replication.LimitReader(ctx, src, 1*mib, clock)); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteTo waiting for the rate after cancel: %v, want context.Canceled", err)
	}
}

func TestLimitReaderWithoutALimitIsTheSourceItself(t *testing.T) {
	src := readerOnly{bytes.NewReader(nil)}
	if r := replication.LimitReader(context.Background(), src, 0, newFakeClock()); r != io.Reader(src) {
		t.Errorf("a rate of 0 wrapped the source: %T", r)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
