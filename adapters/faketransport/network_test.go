package faketransport_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-csi/ferry/adapters/faketransport"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/ports"
)

func TestTwoStoresExchangeAFullStreamThroughTheNetwork(t *testing.T) {
	ctx := t.Context()
	a := memstore.New(t.TempDir(), 1<<30, 1)
	b := memstore.New(t.TempDir(), 1<<30, 2)
	net := faketransport.New()
	net.Add("node-a", a)
	net.Add("node-b", b)

	src, err := a.CreateVolume(ctx, "vol-1", ports.CreateOptions{CapacityBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src.MountPath, "data"), []byte("replicated"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := a.CreateSnapshot(ctx, "vol-1", "ferry-1-1", nil)
	if err != nil {
		t.Fatal(err)
	}

	stream, err := net.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Receive(ctx, "vol-1", stream)
	stream.Close()
	if err != nil {
		t.Fatal(err)
	}
	dst, err := b.GetVolume(ctx, "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst.MountPath, "data")); err != nil || string(got) != "replicated" {
		t.Fatalf("received data %q, %v", got, err)
	}
	if list, _ := b.ListSnapshots(ctx, "vol-1"); len(list) != 1 || list[0].GUID != snap.GUID {
		t.Fatalf("received snapshots %+v, want ferry-1 with GUID %d", list, snap.GUID)
	}

	_, err = net.Fetch(ctx, "node-a", ports.SendRequest{Volume: "vol-1", To: "ferry-1-9"})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("fetch of a missing snapshot: got %v, want the peer's ErrNotFound", err)
	}
}

func TestACutNodeIsUnreachableUntilHealed(t *testing.T) {
	ctx := t.Context()
	a := memstore.New(t.TempDir(), 1<<30, 1)
	if _, err := a.CreateVolume(ctx, "vol-1", ports.CreateOptions{CapacityBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateSnapshot(ctx, "vol-1", "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	net := faketransport.New()
	net.Add("node-a", a)
	req := ports.SendRequest{Volume: "vol-1", To: "ferry-1-1"}

	net.Cut("node-a")
	if _, err := net.Fetch(ctx, "node-a", req); !errors.Is(err, faketransport.ErrUnreachable) {
		t.Fatalf("fetch from a cut node: got %v, want ErrUnreachable", err)
	}
	if _, err := net.Fetch(ctx, "node-x", req); !errors.Is(err, faketransport.ErrUnreachable) {
		t.Fatalf("fetch from an unknown node: got %v, want ErrUnreachable", err)
	}
	net.Heal("node-a")
	stream, err := net.Fetch(ctx, "node-a", req)
	if err != nil {
		t.Fatalf("fetch after heal: %v", err)
	}
	stream.Close()
}
