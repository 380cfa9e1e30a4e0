package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// Review: the daemon restarts while its node is cut off from the API
// server. Its view of the volumes (fed only by the states' watch) stays
// empty, its renewals fail, and the survivors take its volumes over
// Duration + Margin after the lease last changed; the app pod using the
// replicated volume here must be fenced all the same. Before the fix the
// guard fenced only volumes its view named: none.
func TestADaemonStartedWithoutAViewStillFencesItsReplicatedVolumes(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	store := mocks.NewMockSnapshotStore(ctrl)
	mounts := mocks.NewMockMountTable(ctrl)
	fencer := mocks.NewMockFencer(ctrl)
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, NewVolumes(), NewTakers("a", nil, zap.NewNop()), store, mounts, fencer, nil, nopEvents{}, zap.NewNop())
	ctx := context.Background()

	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused")).AnyTimes()
	if g.RenewOnce(ctx) == nil {
		t.Fatal("a failed renewal succeeded")
	}
	clock.set(time.Second)
	rep := ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep", Metadata: map[string]string{ports.MetaReplicationFactor: "2"}}
	single := ports.VolumeInfo{ID: "single", MountPath: "/p/single", MountSource: "pool/single", Metadata: map[string]string{ports.MetaReplicationFactor: "1"}}
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{rep, single}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(rep, nil).AnyTimes()
	mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep", "/k/pods/x/mount"}, nil).AnyTimes()
	fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep", "/k/pods/x/mount"}, "/p/rep").Return(nil, nil).Times(1)
	g.Check(ctx)
	g.Check(ctx) // once
	if g.Fenced("rep") == "" || g.Fenced("single") != "" {
		t.Fatalf("fenced: rep %q, single %q", g.Fenced("rep"), g.Fenced("single"))
	}
}
