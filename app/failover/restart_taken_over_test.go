package failover

import (
	"context"
	"testing"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// Review 21: node a's daemon is down (crashed, restarting with back-off)
// for longer than Duration + Margin while its app pod keeps running and
// writing the volume read/write: nobody renews a's lease and nobody
// fences. b takes the volume over (epoch 4). The daemon comes back: its
// first view already shows b active. checkTakenOver fences only volumes
// this process saw active here before (g.mine, in memory), and the
// ledger learns nothing from a state of a later epoch, so the pod here
// writes on next to b's pod: two writers (until a's kubelet happens to
// process the survivor's force-deletion, if it ever got through).
//
// The restarted guard must fence a read/write pod mount of a copy whose
// volume has another active primary, whatever this process remembers.
func TestARestartedDaemonFencesAPodStillWritingAVolumeTakenOverWhileItWasDown(t *testing.T) {
	ctrl := gomock.NewController(t)
	clock := &fakeClock{}
	lease := mocks.NewMockNodeLease(ctrl)
	lease.EXPECT().Renew(gomock.Any()).Return(nil).AnyTimes()
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{{ID: "rw"}}, nil).AnyTimes()
	info := ports.VolumeInfo{ID: "rw", MountPath: "/p/rw", MountSource: "pool/rw"}
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("rw")).Return(info, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	mounts.EXPECT().MountsOf("pool/rw").Return([]string{"/p/rw", "/k/pods/x/mount"}, nil).AnyTimes()
	mounts.EXPECT().MountAt("/k/pods/x/mount").Return(ports.Mount{Source: "pool/rw"}, true, nil).AnyTimes()
	fenced := 0
	fencer := mocks.NewMockFencer(ctrl)
	fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).DoAndReturn(func(context.Context, []string, string) ([]ports.StoppedProcess, error) {
		fenced++
		return []ports.StoppedProcess{{PID: 7, Command: "db"}}, nil
	}).AnyTimes()

	// Taken over while the daemon was down: the restarted process's
	// first view already shows it.
	st := primaryState("rw", "a", "b")
	if err := replica.Takeover(&st, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	vols := NewVolumes()
	vols.Saw(st)
	ctx := context.Background()
	cluster := fakecluster.New()
	if _, err := cluster.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, nil, nopEvents{}, zap.NewNop())
	_ = g.RenewOnce(ctx) // the node renews again
	for range 3 {
		g.Check(ctx)
	}
	if fenced == 0 {
		t.Fatal("a pod here still mounts read/write a copy of a volume whose active primary is b (epoch 4): the restarted guard never fences it (two writers)")
	}
}
