package provision_test

import (
	"errors"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// REVIEW: a state listing no replica (rvstate.Create's documented
// half-made object: spec written, status not) is removed at once by
// Delete, and DeleteVolume returns before destroying the local copy.
func TestDeleteVolumeOfAStateWithoutReplicasLeavesTheLocalCopy(t *testing.T) {
	states := fakecluster.New()
	const id = volume.ID("pvc-e")
	if _, err := states.Create(ctx, replica.State{Volume: id, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	store := memstore.New(t.TempDir(), 1<<30, 1)
	if _, err := store.CreateVolume(ctx, id, ports.CreateOptions{CapacityBytes: volume.MiB}); err != nil {
		t.Fatal(err)
	}
	c := provision.New(cfg, store, noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Workload: mocks.NewMockReplicaWorkload(gomock.NewController(t))}))
	if err := c.DeleteVolume(ctx, string(id)); err != nil {
		t.Fatal(err)
	}
	_, serr := states.Get(ctx, id)
	if _, err := store.GetVolume(ctx, id); err == nil && errors.Is(serr, ports.ErrNotFound) {
		t.Fatal("BUG: DeleteVolume succeeded, the state is gone, and the local copy stays with nobody to destroy it")
	}
}
