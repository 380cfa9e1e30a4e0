package zfs_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// keptFiles mounts a kept copy where an operator would (its mountpoint
// set), reads its files and unmounts it again.
func keptFiles(t *testing.T, _ ports.SnapshotStore, c ports.KeptCopy) map[string]string {
	t.Helper()
	dataset, _, _ := strings.Cut(c.Name, "@")
	dir := t.TempDir()
	zfstest.ZFS(t, "set", "mountpoint="+dir, dataset)
	defer zfstest.ZFS(t, "set", "mountpoint=none", dataset)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestZFSStoreHonoursTheKeepAsideContract(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-keep", "1G")
	contract.RunKeepAside(t, func(t *testing.T) ports.SnapshotStore { return newStore(t, pool) }, keptFiles)
}

// The copy kept aside lives beside the parent dataset, and its snapshot
// is held: `zfs destroy` refuses it until the hold is released, as the
// copy's Drop says.
func TestAKeptCopyIsHeldOutsideTheParent(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-held", "1G")
	s := newStore(t, pool)
	ctx := context.Background()
	if _, err := s.CreateVolume(ctx, "vol-a", ports.CreateOptions{CapacityBytes: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	kept, err := s.KeepAside(ctx, "vol-a", "k1")
	if err != nil {
		t.Fatal(err)
	}
	dataset, _, _ := strings.Cut(kept.Name, "@")
	if !strings.HasPrefix(dataset, s.KeptRoot()+"/") || strings.HasPrefix(dataset, s.Root()+"/") {
		t.Fatalf("kept as %s: want it under %s, outside %s", kept.Name, s.KeptRoot(), s.Root())
	}
	if out, err := exec.Command("zfs", "destroy", kept.Name).CombinedOutput(); err == nil {
		t.Fatalf("zfs destroy %s succeeded on a held snapshot: %s", kept.Name, out)
	}
	if !strings.Contains(kept.Drop, "zfs release "+zfs.FencedHold+" "+kept.Name) {
		t.Fatalf("Drop = %q: it must release the hold", kept.Drop)
	}
	zfstest.ZFS(t, "release", zfs.FencedHold, kept.Name)
	zfstest.ZFS(t, "destroy", "-r", dataset)
}
