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

func TestMemstoreHonoursTheKeepAsideContract(t *testing.T) {
	contract.RunKeepAside(t, func(t *testing.T) ports.SnapshotStore {
		return memstore.New(t.TempDir(), contract.PoolBytes, 1)
	}, func(t *testing.T, s ports.SnapshotStore, c ports.KeptCopy) map[string]string {
		out := map[string]string{}
		for k, v := range s.(*memstore.Store).KeptFiles(c.Name) {
			out[k] = string(v)
		}
		return out
	})
}
