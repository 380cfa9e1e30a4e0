package zfs_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

const driver = "ferry.zfs.csi.io"

var parents atomic.Int64

// newStore returns a store on its own parent dataset of a shared pool.
func newStore(t *testing.T, pool *zfstest.Pool) *zfs.Store {
	t.Helper()
	s, err := zfs.New(zfs.Config{Pool: pool.Name, Parent: fmt.Sprintf("t%d/ferry", parents.Add(1)), Driver: driver})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestZFSStoreHonoursTheSnapshotStoreContract(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-contract", "1G")
	contract.RunSnapshotStore(t, func(t *testing.T) ports.SnapshotStore { return newStore(t, pool) })
}

func TestZFSStoreNeverTouchesDatasetsItDoesNotOwn(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-owner", "1G")
	s := newStore(t, pool)
	ctx := context.Background()
	foreign := s.Root() + "/stranger"
	zfstest.ZFS(t, "create", foreign)
	zfstest.ZFS(t, "snapshot", foreign+"@keep")

	if _, err := s.GetVolume(ctx, "stranger"); !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("GetVolume(stranger) = %v, want ErrNotOwned", err)
	}
	if err := s.DestroyVolume(ctx, "stranger"); !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("DestroyVolume(stranger) = %v, want ErrNotOwned", err)
	}
	if _, err := s.Send(ctx, ports.SendRequest{Volume: "stranger", To: "keep"}); !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("Send(stranger) = %v, want ErrNotOwned", err)
	}
	vols, err := s.ListVolumes(ctx)
	if err != nil || len(vols) != 0 {
		t.Fatalf("ListVolumes = %+v, %v; want none", vols, err)
	}
	snaps, err := s.ListSnapshots(ctx, "")
	if err != nil || len(snaps) != 0 {
		t.Fatalf("ListSnapshots = %+v, %v; want none", snaps, err)
	}
	if snaps, err := s.ListSnapshots(ctx, "stranger"); !errors.Is(err, ports.ErrNotOwned) {
		t.Fatalf("ListSnapshots(stranger) = %+v, %v; want ErrNotOwned", snaps, err)
	}
	zfstest.ZFS(t, "get", "-H", "-o", "value", "type", foreign+"@keep") // still there
}
