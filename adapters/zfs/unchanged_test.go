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
  "get -H -o value written tank/ferry/vol-idle") echo 0 ;;
  "get -H -o value written tank/ferry/vol-busy") echo 1.50M ;;
  *) echo "fake zfs: unexpected: $*" >&2; exit 1 ;;
esac
`

// On OpenZFS an interval without writes is told by the written property;
// zfs-fuse (which has none) is checked on the real pool by the contract.
func TestOnOpenZFSAVolumeWithNothingWrittenSinceItsSnapshotIsUnchanged(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "zfs")
	if err := os.WriteFile(bin, []byte(writtenZFS), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := zfs.New(zfs.Config{Pool: "tank", Parent: "ferry", Driver: driver, ZFS: bin})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Unchanged(ctx, "vol-idle"); err != nil || !ok {
		t.Fatalf("written=0: Unchanged = %v, %v; want true", ok, err)
	}
	if ok, err := s.Unchanged(ctx, "vol-busy"); err != nil || ok {
		t.Fatalf("written=1.50M: Unchanged = %v, %v; want false", ok, err)
	}
}
