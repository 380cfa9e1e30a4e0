package memstore_test

import (
	"testing"

	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
)

func TestMemstoreHonoursTheSnapshotStoreContract(t *testing.T) {
	contract.RunSnapshotStore(t, func(t *testing.T) ports.SnapshotStore {
		return memstore.New(t.TempDir(), contract.PoolBytes, 1)
	})
}
