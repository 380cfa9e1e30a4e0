package provision_test

import (
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/adapters/memstore"
	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

type noMounts struct{}

func (noMounts) MountsOf(string) ([]string, error) { return nil, nil }

func (noMounts) MountAt(string) (ports.Mount, bool, error) { return ports.Mount{}, false, nil }

func TestAReplicatedVolumeStartsWithThisNodeAsActivePrimaryAndItsSecondariesWorkload(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := memstore.New(t.TempDir(), 1<<30, 1)
	states := fakecluster.New()
	w := mocks.NewMockReplicaWorkload(ctrl)
	c := provision.New(cfg, store, noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Workload: w}))
	req := provision.CreateVolumeRequest{Name: "pvc-r", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "3", "snapshotInterval": "10s"}}

	// Twice: a retried CreateVolume does the same, idempotently.
	w.EXPECT().StartReplica(gomock.Any(), volume.ID("pvc-r"), replica.Node("node-1"), 10*time.Second, true).Return(nil).Times(2)
	w.EXPECT().Apply(gomock.Any(), volume.ID("pvc-r"), placement.Objects{Secondaries: 2, MinAvailable: 1, UsableOn: []replica.Node{"node-1"}}, 10*time.Second).Return(nil).Times(2)
	w.EXPECT().Segment(volume.ID("pvc-r")).Return("replica.ferry.zfs.csi.io/pvc-r", "ready").Times(2)
	for range 2 {
		v, err := c.CreateVolume(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if v.Usable["replica.ferry.zfs.csi.io/pvc-r"] != "ready" || v.Node != "node-1" {
			t.Fatalf("volume %+v: want the node and the placement segment", v)
		}
	}
	st, err := states.Get(ctx, "pvc-r")
	if err != nil {
		t.Fatal(err)
	}
	if st.ReplicationFactor != 3 || st.Epoch != 1 || st.Primary != "node-1" || len(st.Replicas) != 1 || !st.Replicas[0].Active {
		t.Fatalf("state %+v: want node-1 the active primary of epoch 1, factor 3", st)
	}

	// Deleting marks the shared state (the workload stays, its replicas
	// destroy their copies and leave): the local copy is its replica's to
	// destroy, not DeleteVolume's. Deleting again is idempotent, and a
	// node holding no copy deletes it just the same.
	for range 2 {
		if err := c.DeleteVolume(ctx, "pvc-r"); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := states.Get(ctx, "pvc-r"); err != nil || !st.Deleting {
		t.Fatalf("after DeleteVolume the state reads %+v, %v; want it Deleting until its replicas left", st, err)
	}
	if _, err := store.GetVolume(ctx, "pvc-r"); err != nil {
		t.Fatalf("DeleteVolume destroyed a replica's copy under its volume manager: %v", err)
	}
}

// DeleteVolume on a node that holds no copy still deletes a replicated
// volume: its state is marked, wherever the copies are.
func TestDeletingAReplicatedVolumeFromANodeWithoutACopyMarksItsState(t *testing.T) {
	states := fakecluster.New()
	if _, err := states.Create(ctx, replica.State{Volume: "pvc-x", ReplicationFactor: 2, Epoch: 1, Primary: "node-1",
		Replicas: []replica.Replica{{Node: "node-1", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	ctrl := gomock.NewController(t)
	c := provision.New(cfg, memstore.New(t.TempDir(), 1<<30, 1), noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Workload: mocks.NewMockReplicaWorkload(ctrl)}))
	if err := c.DeleteVolume(ctx, "pvc-x"); err != nil {
		t.Fatal(err)
	}
	if st, err := states.Get(ctx, "pvc-x"); err != nil || !st.Deleting {
		t.Fatalf("state after DeleteVolume elsewhere: %+v, %v; want Deleting", st, err)
	}
}

func TestAVolumeOfFactorOneIsNotReplicated(t *testing.T) {
	ctrl := gomock.NewController(t)
	store := memstore.New(t.TempDir(), 1<<30, 1)
	states := fakecluster.New()
	c := provision.New(cfg, store, noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Workload: mocks.NewMockReplicaWorkload(ctrl)})) // any call fails the test
	v, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "pvc-1", Capabilities: rw, Parameters: map[string]string{"defaultReplicationFactor": "1"}})
	if err != nil || v.Usable != nil {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	if _, err := states.Get(ctx, "pvc-1"); err == nil {
		t.Fatal("a state was created for a volume of factor 1")
	}
}
