package zfs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
)

// writtenZFS answers the written property as OpenZFS does: "0" for
// vol-idle, a size for vol-busy.
const writtenZFS = `#!/bin/sh
case "$*" in
  "get -H -o value type tank") echo filesystem ;;
  "create -p tank/ferry") ;;
  "get -H -o value receive_resume_token tank/ferry") echo - ;;
  "get -H -o value encryption tank/ferry")
    # As OpenZFS 0.7 (resume tokens, no encryption) and zfs-fuse answer.
    echo "bad property list: invalid property 'encryption'" >&2; exit 2 ;;
  "get -H -o value written tank/ferry/vol-idle") echo 0 ;;
  "get -H -o value written tank/ferry/vol-busy") echo 1.50M ;;
  "get -H -o value written tank/ferry/vol-lagging")
    if [ -e "$(dirname "$0")/synced" ]; then echo 8K; else echo 0; fi ;;
  *) echo "fake zfs: unexpected: $*" >&2; exit 1 ;;
esac
`

// On OpenZFS an interval without writes is told by the written property;
// zfs-fuse (which has none) is checked on the real pool by the contract.
func TestOnOpenZFSAVolumeWithNothingWrittenSinceItsSnapshotIsUnchanged(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := writtenStore(t, dir, fakeZpool(t, dir))
	if ok, err := s.Unchanged(ctx, "vol-idle"); err != nil || !ok {
		t.Fatalf("written=0: Unchanged = %v, %v; want true", ok, err)
	}
	if ok, err := s.Unchanged(ctx, "vol-busy"); err != nil || ok {
		t.Fatalf("written=1.50M: Unchanged = %v, %v; want false", ok, err)
	}
}

// fakeZpool answers `zpool sync tank` by marking dir/synced (what the
// written property of vol-lagging then shows) and logging it to dir/syncs.
func fakeZpool(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "zpool")
	script := `#!/bin/sh
d="$(dirname "$0")"
case "$*" in
  "sync tank") echo sync >>"$d/syncs"; touch "$d/synced" ;;
  "get all tank") echo "NAME  PROPERTY  VALUE  SOURCE" ;;
  *) echo "fake zpool: unexpected: $*" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// OpenZFS counts written only in synced transaction groups: a volume
// written a moment ago still reads 0. Unchanged believes a 0 only after a
// pool sync, or a primary would skip the snapshot of fresh writes.
func TestOnOpenZFSAWrittenOfZeroIsBelievedOnlyAfterAPoolSync(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := writtenStore(t, dir, fakeZpool(t, dir))
	if ok, err := s.Unchanged(ctx, "vol-lagging"); err != nil || ok {
		t.Fatalf("written 0 before the sync, 8K after: Unchanged = %v, %v; want false", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "syncs")); err != nil {
		t.Fatalf("no pool sync was run: %v", err)
	}
	// A non-zero written needs no sync.
	os.Remove(filepath.Join(dir, "syncs"))
	if ok, err := s.Unchanged(ctx, "vol-busy"); err != nil || ok {
		t.Fatalf("written=1.50M: Unchanged = %v, %v; want false", ok, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "syncs")); err == nil {
		t.Fatal("a pool sync was run for a non-zero written")
	}
}

// A pool sync that fails leaves Unchanged unable to tell: false, no error.
func TestOnOpenZFSAFailedPoolSyncCannotTell(t *testing.T) {
	dir := t.TempDir()
	zpool := filepath.Join(dir, "zpool")
	if err := os.WriteFile(zpool, []byte("#!/bin/sh\n[ \"$*\" = \"get all tank\" ] && exit 0\necho \"cannot sync: I/O error\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := writtenStore(t, dir, zpool)
	if ok, err := s.Unchanged(ctx, "vol-idle"); err != nil || ok {
		t.Fatalf("the sync failed: Unchanged = %v, %v; want false, nil", ok, err)
	}
}

// writtenStore opens a store on the fake zfs CLI writtenZFS (written in
// dir) and the zpool CLI at zpool.
func writtenStore(t *testing.T, dir, zpool string) *zfs.Store {
	t.Helper()
	bin := filepath.Join(dir, "zfs")
	if err := os.WriteFile(bin, []byte(writtenZFS), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := zfs.New(zfs.Config{Pool: "tank", Parent: "ferry", Driver: driver, ZFS: bin, Zpool: zpool})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}
