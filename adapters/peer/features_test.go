package peer

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// acceptSource tells what the server was asked to send.
type acceptSource struct {
	noSnapshots
	accept chan volume.StreamFeatures
}

func (s acceptSource) Send(_ context.Context, req ports.SendRequest) (io.ReadCloser, error) {
	s.accept <- req.Accept
	return io.NopCloser(strings.NewReader("STREAM")), nil
}

// What the receiver's pool takes beyond a plain stream reaches the
// sender's store as it was asked; a receiver that says nothing (an older
// node) is sent a plain stream; a name this build does not know is left
// out.
func TestTheStreamFeaturesAReceiverTakesReachTheSender(t *testing.T) {
	src := acceptSource{accept: make(chan volume.StreamFeatures, 1)}
	srv := newServer(src, nil, zap.NewNop(), speaks)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	c := NewClient(func(replica.Node) (string, error) { return l.Addr().String(), nil }, nil)
	defer c.Close()
	for _, want := range []volume.StreamFeatures{
		{Compressed: true, LargeBlocks: true, Embedded: true},
		{LargeBlocks: true},
		{},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := c.Fetch(ctx, "n", ports.SendRequest{Volume: "v", To: "ferry-1-1", Accept: want})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, _ = io.ReadAll(r)
		r.Close()
		cancel()
		if got := <-src.accept; got != want {
			t.Errorf("asked to accept %+v, the sender's store was asked %+v", want, got)
		}
	}
	if got := parseFeatures([]string{"embedded", "zstd-dictionaries", ""}); got != (volume.StreamFeatures{Embedded: true}) {
		t.Errorf("unknown names: %+v, want only embedded", got)
	}
}
