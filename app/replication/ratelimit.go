package replication

import (
	"context"
	"io"
	"time"
)

// Clock is the time a transfer's rate limit follows. Tests inject one that
// steps on Sleep, so the limiter is checked without wall-clock timing luck.
type Clock interface {
	Now() time.Time
	// Sleep returns after d, or ctx's error as soon as ctx ends.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx ends.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Burst bounds of the token bucket: a sixteenth of a second's worth, so
// that the rate holds over short windows too, within these bounds (small
// pieces cost a sleep each; big ones make the stream jerky).
const (
	minBurst = 32 << 10
	maxBurst = 4 << 20
)

// tokenBucket lets bytesPerSecond through on average and at most burst
// bytes at once after an idle spell. It is used by one goroutine (a
// transfer's reader); it is not safe for concurrent use.
type tokenBucket struct {
	rate   float64 // bytes per second, > 0
	burst  int64
	clock  Clock
	tokens float64 // may go below zero: bytes already let through on credit
	last   time.Time
}

func newTokenBucket(bytesPerSecond int64, clock Clock) *tokenBucket {
	burst := min(max(bytesPerSecond/16, minBurst), maxBurst)
	return &tokenBucket{rate: float64(bytesPerSecond), burst: burst, clock: clock, tokens: float64(burst), last: clock.Now()}
}

// take accounts for n bytes (n <= burst) and sleeps until the rate allows
// them: the bucket refills at rate up to burst, n tokens are taken, and a
// deficit is slept off.
func (b *tokenBucket) take(ctx context.Context, n int) error {
	now := b.clock.Now()
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(float64(b.burst), b.tokens+elapsed.Seconds()*b.rate)
	}
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return nil
	}
	return b.clock.Sleep(ctx, time.Duration(-b.tokens/b.rate*float64(time.Second)))
}

// LimitReader returns a reader of r that delivers at most bytesPerSecond on
// average (bytesPerSecond <= 0: r itself). Its reads and its WriteTo end
// with ctx's error once ctx ends while waiting. It keeps r's WriteTo (the
// peer stream's zero-copy path), cutting the writes into pieces of at most
// the bucket's burst.
func LimitReader(ctx context.Context, r io.Reader, bytesPerSecond int64, clock Clock) io.Reader {
	if bytesPerSecond <= 0 {
		return r
	}
	return &limitedReader{ctx: ctx, r: r, bucket: newTokenBucket(bytesPerSecond, clock)}
}

type limitedReader struct {
	ctx    context.Context
	r      io.Reader
	bucket *tokenBucket
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.bucket.burst {
		p = p[:l.bucket.burst]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.bucket.take(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// WriteTo hands r's own WriteTo a writer that waits for the rate.
func (l *limitedReader) WriteTo(w io.Writer) (int64, error) {
	lw := &limitedWriter{ctx: l.ctx, w: w, bucket: l.bucket}
	if wt, ok := l.r.(io.WriterTo); ok {
		return wt.WriteTo(lw)
	}
	return io.Copy(lw, l.r)
}

type limitedWriter struct {
	ctx    context.Context
	w      io.Writer
	bucket *tokenBucket
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		piece := b[:min(int64(len(b)), l.bucket.burst)]
		if err := l.bucket.take(l.ctx, len(piece)); err != nil {
			return written, err
		}
		n, err := l.w.Write(piece)
		written += n
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}
