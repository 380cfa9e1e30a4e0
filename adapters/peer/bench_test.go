package peer_test

import (
	"context"
	"io"
	"testing"

	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/ports"
)

// sized is a store whose every stream is n bytes of a repeated pattern,
// made without disk or zfs: the benchmark measures the transport alone.
type sized struct {
	ports.SnapshotStore
	n int64
}

func (s sized) Send(context.Context, ports.SendRequest) (io.ReadCloser, error) {
	return io.NopCloser(io.LimitReader(pattern{}, s.n)), nil
}

type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

// BenchmarkFetchOverMutualTLS streams 64 MiB per operation through the
// peer service and client (TLS 1.3 on loopback) into io.Discard; MB/s and
// allocations per operation are the figures to watch.
func BenchmarkFetchOverMutualTLS(b *testing.B) {
	const size = 64 << 20
	e := startB(b, sized{SnapshotStore: memstore.New(b.TempDir(), 1<<30, 1), n: size})
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := e.client.Fetch(context.Background(), "node-a", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"})
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes, %v", n, err)
		}
	}
}
