package provision_test

import (
	"context"
	"reflect"
	"testing"
	"time"

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

// specStates is a ClusterState that records a VolumeSpec, as the
// Kubernetes store does.
type specStates struct {
	*fakecluster.Store
	specs map[volume.ID]ports.VolumeSpec
}

func (s *specStates) CreateWithSpec(ctx context.Context, st replica.State, spec ports.VolumeSpec) (replica.State, error) {
	created, err := s.Create(ctx, st)
	if err == nil {
		s.specs[st.Volume] = spec
	}
	return created, err
}

// A replicated volume's shared state records what the volume is: its
// size, snapshot interval, properties (every copy takes them),
// PersistentVolume and claim (from the
// provisioner's metadata), for operators and events.
func TestAReplicatedVolumesStateRecordsItsSizeIntervalVolumeAndClaim(t *testing.T) {
	ctrl := gomock.NewController(t)
	states := &specStates{Store: fakecluster.New(), specs: map[volume.ID]ports.VolumeSpec{}}
	w := mocks.NewMockReplicaWorkload(ctrl)
	w.EXPECT().StartReplica(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	w.EXPECT().Apply(gomock.Any(), gomock.Any(), gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	w.EXPECT().Segment(gomock.Any()).Return("replica.ferry.zfs.csi.io/x", "ready").AnyTimes()
	c := provision.New(cfg, memstore.New(t.TempDir(), 1<<30, 1), noMounts{}, zap.NewNop(), provision.WithReplication(provision.Replication{Cluster: states, Specs: states, Workload: w}))

	v, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "pvc-s", Capacity: volume.CapacityRange{RequiredBytes: 3 * volume.MiB}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "2", "snapshotInterval": "45s", "atime": "off", "compression": "lz4",
			"csi.storage.k8s.io/pvc/namespace": "shop", "csi.storage.k8s.io/pvc/name": "orders", "csi.storage.k8s.io/pv/name": "pvc-s"}})
	if err != nil {
		t.Fatal(err)
	}
	want := ports.VolumeSpec{CapacityBytes: v.CapacityBytes, SnapshotInterval: 45 * time.Second, PersistentVolume: "pvc-s", ClaimNamespace: "shop", ClaimName: "orders",
		Properties: map[string]string{"atime": "off", "compression": "lz4"}}
	if got := states.specs["pvc-s"]; !reflect.DeepEqual(got, want) || got.CapacityBytes < 3*volume.MiB {
		t.Fatalf("recorded spec %+v, want %+v", got, want)
	}

	// Without the provisioner's metadata the volume's name is its PV's
	// (external-provisioner names volumes so), and there is no claim.
	if _, err := c.CreateVolume(ctx, provision.CreateVolumeRequest{Name: "pvc-t", Capacity: volume.CapacityRange{RequiredBytes: volume.MiB}, Capabilities: rw,
		Parameters: map[string]string{"defaultReplicationFactor": "2"}}); err != nil {
		t.Fatal(err)
	}
	if got := states.specs["pvc-t"]; got.PersistentVolume != "pvc-t" || got.ClaimName != "" || got.SnapshotInterval != volume.DefaultSnapshotInterval || got.CapacityBytes == 0 {
		t.Fatalf("recorded spec %+v: want the PV named after the volume, no claim, the default interval and the size", got)
	}
}
