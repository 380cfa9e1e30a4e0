package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

type noSnapshots struct{ Source }

func (noSnapshots) ListSnapshots(context.Context, volume.ID) ([]ports.SnapshotInfo, error) {
	return nil, nil
}

func TestAgreeOnTheHighestCommonVersionOrRefuseNamingBoth(t *testing.T) {
	for _, c := range []struct {
		ours, theirs versions
		want         int
	}{
		{versions{1, 2}, versions{1, 1}, 1}, // N serving N-1
		{versions{1, 1}, versions{1, 2}, 1}, // N-1 serving N
		{versions{2, 3}, versions{1, 3}, 3},
	} {
		if v, err := agree(c.ours, c.theirs); err != nil || v != c.want {
			t.Errorf("agree(%s, %s) = %d, %v; want %d", c.ours, c.theirs, v, err, c.want)
		}
	}
	_, err := agree(versions{2, 3}, versions{1, 1})
	if err == nil || !strings.Contains(err.Error(), "2-3") || !strings.Contains(err.Error(), "1-1") {
		t.Fatalf("no common version: %v", err)
	}
	if v, err := parseVersions(nil); err != nil || v != (versions{1, 1}) {
		t.Fatalf("a call without the header (a node older than it): %v %v", v, err)
	}
	for _, bad := range []string{"x", "2-1", "0-1", "-1"} {
		if _, err := parseVersions([]string{bad}); err == nil {
			t.Errorf("range %q accepted", bad)
		}
	}
}

// A node of a version that no longer speaks the asking node's protocol
// refuses its calls with an error naming both ranges; one in range, and
// one that sends no version (older than the header), are served.
func TestAnIncompatiblePeerIsRefusedWithAClearError(t *testing.T) {
	serve := func(v versions) string {
		srv := newServer(noSnapshots{}, nil, zap.NewNop(), v)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(srv.Stop)
		return l.Addr().String()
	}
	call := func(addr string, v versions) error {
		c := NewClient(func(replica.Node) (string, error) { return addr, nil }, nil)
		c.speaks = v
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Snapshots(ctx, "n", "vol-1")
		return err
	}
	newer, current := serve(versions{2, 3}), serve(versions{1, 2})
	err := call(newer, versions{1, 1})
	if !errors.Is(err, ports.ErrIncompatible) || !strings.Contains(err.Error(), "speaks versions 2-3, the calling node 1-1") {
		t.Fatalf("a peer two versions behind: %v", err)
	}
	if err := call(newer, versions{1, 2}); err != nil {
		t.Fatalf("a peer speaking 1-2: %v", err)
	}
	// A node older than the header sends none: version 1.
	headerless := func(addr string) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var resp SnapshotsResponse
		return cc.Invoke(ctx, methodSnapshots, &SnapshotsRequest{Volume: "vol-1"}, &resp)
	}
	if err := headerless(current); err != nil {
		t.Fatalf("a node without the header, served by one speaking 1-2: %v", err)
	}
	if err := headerless(newer); err == nil {
		t.Fatal("a node without the header (version 1) served by one speaking 2-3")
	}
}

// rawSource serves vol-enc raw only, as the ZFS store does an encrypted
// volume: refused to a receiver that cannot take a raw stream.
type rawSource struct {
	noSnapshots
	plaintextOnly chan bool
}

func (s rawSource) Send(_ context.Context, req ports.SendRequest) (io.ReadCloser, error) {
	s.plaintextOnly <- req.PlaintextOnly
	if req.Volume == "vol-enc" && req.PlaintextOnly {
		return nil, fmt.Errorf("send %s: %w", req.Volume, ports.ErrRawUnsupported)
	}
	return io.NopCloser(strings.NewReader("STREAM")), nil
}

// Version 2 brought raw streams: a peer of version 1 is never sent one
// (an encrypted volume asked by it is FailedPrecondition, which its
// client reads as ErrIncompatible), and is served plaintext volumes as
// ever; a peer of version 2 may be sent raw.
func TestAPeerOfVersionOneIsNeverSentARawStream(t *testing.T) {
	if Protocol < rawStreams || MinProtocol > 1 {
		t.Fatalf("protocol %d-%d: raw streams need a bump, and version 1 must still be served", MinProtocol, Protocol)
	}
	src := rawSource{plaintextOnly: make(chan bool, 1)}
	srv := newServer(src, nil, zap.NewNop(), speaks)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	fetch := func(v versions, id volume.ID) (bool, error) {
		c := NewClient(func(replica.Node) (string, error) { return l.Addr().String(), nil }, nil)
		c.speaks = v
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := c.Fetch(ctx, "n", ports.SendRequest{Volume: id, To: "ferry-1-1"})
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		return <-src.plaintextOnly, err
	}
	if only, err := fetch(versions{1, 1}, "vol-enc"); !only || !errors.Is(err, ports.ErrIncompatible) || !strings.Contains(err.Error(), "raw") {
		t.Fatalf("an encrypted volume asked by a peer of version 1: plaintext only %v, %v; want refused, FailedPrecondition", only, err)
	}
	if only, err := fetch(versions{1, 1}, "vol-plain"); !only || err != nil {
		t.Fatalf("a plaintext volume asked by a peer of version 1: plaintext only %v, %v; want served", only, err)
	}
	if only, err := fetch(speaks, "vol-enc"); only || err != nil {
		t.Fatalf("an encrypted volume asked by a peer of this version: plaintext only %v, %v; want served", only, err)
	}
}
