package zfs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// A locked volume's mounted filesystem refuses a new file at once (no
// remount), and says so in its metadata; unlocked, it takes writes again
// and the record is gone. Both are idempotent; a volume that does not
// exist is ErrNotFound.
func TestLockWritesMakesTheMountedFilesystemReadOnlyUntilUnlocked(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-writelock", "1G")
	s := newStore(t, pool)
	ctx := context.Background()
	info, err := s.CreateVolume(ctx, "vol", ports.CreateOptions{CapacityBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "before"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.LockWrites(ctx, "vol", "the permit ran out"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "during"), []byte("x"), 0o644); err == nil {
		t.Fatal("a new file was written on a locked volume")
	}
	got, err := s.GetVolume(ctx, "vol")
	if err != nil || got.Metadata[ports.MetaWritesLocked] != "the permit ran out" {
		t.Fatalf("locked volume's metadata %v (%v)", got.Metadata, err)
	}
	for range 2 {
		if err := s.UnlockWrites(ctx, "vol"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(info.MountPath, "after"), []byte("x"), 0o644); err != nil {
		t.Fatalf("unlocked volume refuses writes: %v", err)
	}
	got, err = s.GetVolume(ctx, "vol")
	if err != nil || got.Metadata[ports.MetaWritesLocked] != "" {
		t.Fatalf("unlocked volume's metadata %v (%v)", got.Metadata, err)
	}
	if err := s.LockWrites(ctx, "nope", "x"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("LockWrites(nope) = %v, want ErrNotFound", err)
	}
	if err := s.UnlockWrites(ctx, "nope"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("UnlockWrites(nope) = %v, want ErrNotFound", err)
	}
}
