package zfs_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// requireEncryption skips only where the pool truly has no native
// encryption (zfs-fuse); an OpenZFS pool that cannot encrypt fails.
func requireEncryption(t *testing.T, s *zfs.Store) {
	t.Helper()
	if s.CanEncrypt() {
		return
	}
	if isZFSFuse() {
		t.Skip("zfs-fuse has no native encryption (no encryption property, no feature@encryption): this test runs on OpenZFS (the OpenZFS lane, tests/openzfs)")
	}
	t.Fatal("an OpenZFS pool without feature@encryption enabled: the encryption test cannot run, and must not pass by skipping")
}

// sendAll captures a whole stream through the store's Send.
func sendAll(t *testing.T, s *zfs.Store, req ports.SendRequest) []byte {
	t.Helper()
	r, err := s.Send(context.Background(), req)
	if err != nil {
		t.Fatalf("Send %+v: %v", req, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("Send %+v: %v", req, err)
	}
	return b
}

func prop(t *testing.T, dataset, name string) string {
	return strings.TrimSpace(zfstest.ZFS(t, "get", "-H", "-o", "value", name, dataset))
}

// The definition of done (24.3): an encrypted volume replicates
// raw and its secondary holds no key. Two stores on one pool stand for
// the primary's and the secondary's node; the streams go through the
// store's own Send and Receive, as the peer service carries them.
func TestOnOpenZFSAnEncryptedVolumeReplicatesRawAndItsSecondaryHoldsNoKey(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-enc", "1G")
	primary, secondary := newStore(t, pool), newStore(t, pool)
	requireEncryption(t, primary)
	ctx := context.Background()

	b := make([]byte, 16)
	_, _ = rand.Read(b)
	marker := "ferry-plaintext-marker-" + hex.EncodeToString(b)
	content := strings.Repeat(marker+"\n", 64)

	// A plaintext volume's stream shows its data: the check below means
	// something.
	plain, err := primary.CreateVolume(ctx, "plain", ports.CreateOptions{CapacityBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plain.MountPath, "marker"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.CreateSnapshot(ctx, "plain", "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	if s := sendAll(t, primary, ports.SendRequest{Volume: "plain", To: "ferry-1-1"}); !bytes.Contains(s, []byte(marker)) {
		t.Fatal("a plaintext volume's stream does not show the marker: the check on the encrypted stream proves nothing")
	}

	const pass = "correct horse battery staple"
	key, err := volume.ParseKey(volume.KeyPassphrase, map[string]string{volume.SecretKeyField: pass})
	if err != nil {
		t.Fatal(err)
	}
	enc := volume.Encryption{Cipher: volume.DefaultCipher, KeyFormat: volume.KeyPassphrase}
	info, err := primary.CreateVolume(ctx, "enc", ports.CreateOptions{CapacityBytes: 64 << 20, Encryption: enc, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ds := primary.Root() + "/enc"
	if got := prop(t, ds, "encryptionroot"); got != ds {
		t.Fatalf("the volume's encryptionroot is %q, want itself", got)
	}
	if info.Metadata[ports.MetaEncryption] != enc.Record() || !info.Encryption.KeyLoaded {
		t.Fatalf("created volume %+v: want Ferry's record and the key loaded", info)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "marker"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.CreateSnapshot(ctx, "enc", "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	full := sendAll(t, primary, ports.SendRequest{Volume: "enc", To: "ferry-1-1"})
	if bytes.Contains(full, []byte(marker)) || bytes.Contains(full, []byte(pass)) {
		t.Fatal("the full stream of an encrypted volume shows its plaintext (or its key): it was not sent raw")
	}
	if err := secondary.Receive(ctx, "enc", bytes.NewReader(full)); err != nil {
		t.Fatalf("raw full receive without a key: %v", err)
	}

	// An incremental, raw too, received with no key loaded.
	if err := os.WriteFile(filepath.Join(info.MountPath, "second"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.CreateSnapshot(ctx, "enc", "ferry-1-2", nil); err != nil {
		t.Fatal(err)
	}
	incr := sendAll(t, primary, ports.SendRequest{Volume: "enc", From: "ferry-1-1", To: "ferry-1-2"})
	if bytes.Contains(incr, []byte(marker)) {
		t.Fatal("the incremental stream of an encrypted volume shows its plaintext")
	}
	if err := secondary.Receive(ctx, "enc", bytes.NewReader(incr)); err != nil {
		t.Fatalf("raw incremental receive without a key: %v", err)
	}

	sds := secondary.Root() + "/enc"
	if got := prop(t, sds, "keystatus"); got != "unavailable" {
		t.Fatalf("the secondary's keystatus is %q, want unavailable: it must hold no key", got)
	}
	if got := prop(t, sds, "encryptionroot"); got != sds {
		t.Fatalf("the secondary's encryptionroot is %q, want itself", got)
	}
	copyInfo, err := secondary.GetVolume(ctx, "enc")
	if err != nil {
		t.Fatal(err)
	}
	if copyInfo.Metadata[ports.MetaEncryption] != enc.Record() || copyInfo.Encryption.KeyLoaded || !copyInfo.Encryption.OwnRoot {
		t.Fatalf("the secondary's copy: %+v; want Ferry's record, its own root, no key", copyInfo)
	}
	// What a secondary reads works on a locked copy: its snapshots, and
	// written (Unchanged).
	if snaps, err := secondary.ListSnapshots(ctx, "enc"); err != nil || len(snaps) != 2 {
		t.Fatalf("the secondary's snapshots: %+v, %v", snaps, err)
	}
	if _, err := secondary.Unchanged(ctx, "enc"); err != nil {
		t.Fatalf("Unchanged on a copy without its key: %v", err)
	}
	// The secondary, as a source, sends raw too (a copy of a copy).
	if again := sendAll(t, secondary, ports.SendRequest{Volume: "enc", From: "ferry-1-1", To: "ferry-1-2"}); bytes.Contains(again, []byte(marker)) {
		t.Fatal("the secondary's stream shows the plaintext")
	}

	// A promotion with a wrong key is refused and changes nothing.
	wrong, _ := volume.ParseKey(volume.KeyPassphrase, map[string]string{volume.SecretKeyField: "wrong horse battery staple"})
	if err := secondary.LoadKey(ctx, "enc", wrong); !errors.Is(err, ports.ErrKeyRejected) {
		t.Fatalf("LoadKey with a wrong key: %v, want ErrKeyRejected", err)
	}
	if got := prop(t, sds, "keystatus"); got != "unavailable" {
		t.Fatalf("after a wrong key keystatus is %q", got)
	}
	if got := prop(t, sds, "mounted"); got != "no" {
		t.Fatalf("after a wrong key the copy is mounted: %q", got)
	}

	// With the key, the copy mounts and shows the primary's data.
	if err := secondary.LoadKey(ctx, "enc", key); err != nil {
		t.Fatalf("LoadKey with the key: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(copyInfo.MountPath, "marker"))
	if err != nil || string(got) != content {
		t.Fatalf("the promoted copy's marker file: %d bytes, %v; want the primary's", len(got), err)
	}
	// The node that stops serving it unmounts and unloads.
	if err := secondary.UnloadKey(ctx, "enc"); err != nil {
		t.Fatal(err)
	}
	if got := prop(t, sds, "keystatus"); got != "unavailable" {
		t.Fatalf("after UnloadKey keystatus is %q", got)
	}
}

// A volume under an encrypted parent (a Ferry parent dataset under
// `zpool create -O encryption=on`, the operator's key) is an ordinary
// volume: sent as before encryption, not raw, not refused.
func TestOnOpenZFSAVolumeEncryptedByItsParentIsSentAsAnOrdinaryVolume(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-encparent", "1G")
	s := newStore(t, pool)
	requireEncryption(t, s)
	ctx := context.Background()
	key, _ := volume.ParseKey(volume.KeyHex, map[string]string{volume.SecretKeyField: strings.Repeat("ab", 32)})
	if _, err := s.CreateVolume(ctx, "outer", ports.CreateOptions{CapacityBytes: 64 << 20,
		Encryption: volume.Encryption{Cipher: "aes-256-gcm", KeyFormat: volume.KeyHex}, Key: key}); err != nil {
		t.Fatal(err)
	}
	inner, err := zfs.New(zfs.Config{Pool: pool.Name, Parent: strings.TrimPrefix(s.Root(), pool.Name+"/") + "/outer", Driver: driver})
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.CreateVolume(ctx, "inherits", ports.CreateOptions{CapacityBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.CreateSnapshot(ctx, "inherits", "ferry-1-1", nil); err != nil {
		t.Fatal(err)
	}
	r, err := inner.Send(ctx, ports.SendRequest{Volume: "inherits", To: "ferry-1-1"})
	if err != nil {
		t.Fatalf("Send of a volume encrypted by its parent: %v, want sent as an ordinary volume", err)
	}
	stream, err := io.ReadAll(r)
	r.Close()
	if err != nil || len(stream) == 0 {
		t.Fatalf("the stream of a volume encrypted by its parent: %d bytes, %v", len(stream), err)
	}
	plain := newStore(t, zfstest.NewPool(t, "ferry-encparent-dst", "1G"))
	if err := plain.Receive(ctx, "inherits", bytes.NewReader(stream)); err != nil {
		t.Fatalf("a plaintext pool could not receive it (was it sent raw?): %v", err)
	}
	if info, err := plain.GetVolume(ctx, "inherits"); err != nil || info.Encryption.Encrypted() || info.Metadata[ports.MetaEncryption] != "" {
		t.Fatalf("the received copy: %+v, %v; want plaintext, no encryption record", info, err)
	}
}
