package replication

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

const progressLogInterval = 5 * time.Second

// Progress tracks one transfer: bytes so far and rate. It is what a status
// endpoint or metrics read while the transfer runs.
type Progress struct {
	Peer     string
	Snapshot string
	Started  time.Time
	// Total is the expected stream length, 0 when unknown.
	Total int64
	bytes atomic.Int64
}

func newProgress(peer, snapshot string, total int64) *Progress {
	return &Progress{Peer: peer, Snapshot: snapshot, Started: time.Now(), Total: total}
}

// ETA is the time left at the rate so far, 0 when unknown.
func (p *Progress) ETA() time.Duration {
	rate, left := p.Rate(), p.Total-p.Bytes()
	if p.Total <= 0 || rate <= 0 || left <= 0 {
		return 0
	}
	return time.Duration(float64(left) / rate * float64(time.Second))
}

// Bytes received so far.
func (p *Progress) Bytes() int64 { return p.bytes.Load() }

// Elapsed since the transfer started.
func (p *Progress) Elapsed() time.Duration { return time.Since(p.Started) }

// Rate in bytes per second so far.
func (p *Progress) Rate() float64 {
	d := p.Elapsed().Seconds()
	if d <= 0 {
		return 0
	}
	return float64(p.Bytes()) / d
}

func (p *Progress) reader(r io.Reader) io.Reader { return &countingReader{r: r, p: p} }

// logEvery logs progress until the returned function is called.
func (p *Progress) logEvery(ctx context.Context, log *zap.Logger, every time.Duration) func() {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				log.Info("fetch in progress", zap.Int64("bytes", p.Bytes()), zap.Int64("estimatedBytes", p.Total),
					zap.Float64("MBps", p.Rate()/1e6), zap.Duration("eta", p.ETA()))
			}
		}
	}()
	return cancel
}

type countingReader struct {
	r io.Reader
	p *Progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.bytes.Add(int64(n))
	return n, err
}

// WriteTo keeps io.Copy on the source's own WriteTo (whole chunks, no
// intermediate buffer) while counting.
func (c *countingReader) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.r.(io.WriterTo); ok {
		return wt.WriteTo(&countingWriter{w: w, p: c.p})
	}
	return io.Copy(w, struct{ io.Reader }{c})
}

type countingWriter struct {
	w io.Writer
	p *Progress
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.bytes.Add(int64(n))
	return n, err
}
