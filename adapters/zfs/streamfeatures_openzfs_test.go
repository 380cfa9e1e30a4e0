package zfs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// Issue 24.3: compressed, large-block and embedded streams where both
// pools take them. On OpenZFS a volume of compressible data with 1 MiB
// records is sent with -L -e -c: the stream is smaller than a plain one
// (its blocks travel as compressed on disk), and a receiving store
// applies it, full and incremental, with the data intact. On zfs-fuse the
// pool takes none of them and a request for all is sent plain. Prints
// the two streams' bytes (the benchmark's figure: bytes, not time, mean
// something under emulation).
func TestStreamsCarryWhatBothPoolsTakeAndArriveIntact(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-feat", "1G")
	sender, receiver := newStore(t, pool), newStore(t, pool)
	all := volume.StreamFeatures{Compressed: true, LargeBlocks: true, Embedded: true}
	ctx := context.Background()
	props := map[string]string{"compression": "lz4", "recordsize": "1M"}
	if isZFSFuse() {
		if f := sender.StreamFeatures(); !f.None() {
			t.Fatalf("a zfs-fuse pool says it takes %+v: it takes plain streams only", f)
		}
		props = map[string]string{"compression": "on"} // zfs-fuse: no lz4, records up to 128k
	} else if f := sender.StreamFeatures(); f != all {
		t.Fatalf("an OpenZFS 2.x pool with its default features says it takes %+v, want %+v", f, all)
	}
	info, err := sender.CreateVolume(ctx, "feat", ports.CreateOptions{CapacityBytes: 256 << 20, Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for i := 0; text.Len() < 8<<20; i++ {
		fmt.Fprintf(&text, "line %08d of a compressible volume, replicated by snapshots\n", i)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(info.MountPath, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("big", text.String())
	write("tiny", "a file small enough to be embedded in its block pointer\n")
	if _, err := sender.CreateSnapshot(ctx, "feat", "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	plain := sendAll(t, sender, ports.SendRequest{Volume: "feat", To: "ferry-1-1"})
	featured := sendAll(t, sender, ports.SendRequest{Volume: "feat", To: "ferry-1-1", Accept: all})
	t.Logf("stream bytes of %d MiB of text: plain %d, asking for -L -e -c %d (%.2f of plain)", text.Len()>>20, len(plain), len(featured), float64(len(featured))/float64(len(plain)))
	if isZFSFuse() {
		if len(plain) != len(featured) {
			t.Errorf("zfs-fuse sent %d bytes asked for features, %d plain: it must send plain", len(featured), len(plain))
		}
	} else if len(featured) >= len(plain)*3/4 {
		t.Errorf("a compressed stream of compressible data is %d bytes, the plain one %d: -c was not used", len(featured), len(plain))
	}
	if err := receiver.Receive(ctx, "feat", bytes.NewReader(featured)); err != nil {
		t.Fatalf("the full stream sent with features does not apply: %v", err)
	}
	write("more", text.String()[:1<<20])
	if _, err := sender.CreateSnapshot(ctx, "feat", "ferry-1-2", nil); err != nil {
		t.Fatal(err)
	}
	incr := sendAll(t, sender, ports.SendRequest{Volume: "feat", From: "ferry-1-1", To: "ferry-1-2", Accept: all})
	if err := receiver.Receive(ctx, "feat", bytes.NewReader(incr)); err != nil {
		t.Fatalf("the incremental stream sent with features does not apply: %v", err)
	}
	got, err := receiver.GetVolume(ctx, "feat")
	if err != nil {
		t.Fatal(err)
	}
	// The copy is read where the receiver mounts it (a secondary's is
	// mounted read-only at its mountpoint).
	for name, want := range map[string]string{"big": text.String(), "tiny": "a file small enough to be embedded in its block pointer\n", "more": text.String()[:1<<20]} {
		b, err := os.ReadFile(filepath.Join(got.MountPath, name))
		if err != nil || string(b) != want {
			t.Errorf("%s on the copy: %d bytes, %v; want %d bytes as written", name, len(b), err, len(want))
		}
	}
}
