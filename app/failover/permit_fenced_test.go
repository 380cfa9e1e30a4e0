package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// A volume taken over under a read/write pod here (seen active here by
// this process, or not: a daemon that restarted) has a passed deadline in
// the permit before the guard fences it, so that the watchdog fences it
// too should the daemon die meanwhile; once the fence is done the volume
// has the lease's end again, as any volume whose primary is elsewhere (a
// handover to this node must not be fenced).
func TestAVolumeTakenOverUnderAPodHereHasAPassedDeadlineWhileTheGuardFencesIt(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(map[bool]string{false: "seen active here", true: "restarted daemon"}[restarted], func(t *testing.T) {
			ctrl := gomock.NewController(t)
			ctx := context.Background()
			clock := &fakeClock{}
			lease := mocks.NewMockNodeLease(ctrl)
			lease.EXPECT().Renew(gomock.Any()).Return(nil).AnyTimes()
			info := ports.VolumeInfo{ID: "rw", MountPath: "/p/rw", MountSource: "pool/rw"}
			store := mocks.NewMockSnapshotStore(ctrl)
			store.EXPECT().GetVolume(gomock.Any(), volume.ID("rw")).Return(info, nil).AnyTimes()
			mounts := mocks.NewMockMountTable(ctrl)
			mounts.EXPECT().MountsOf("pool/rw").Return([]string{"/p/rw", "/k/pods/x/mount"}, nil).AnyTimes()
			mounts.EXPECT().MountAt("/k/pods/x/mount").Return(ports.Mount{Source: "pool/rw"}, true, nil).AnyTimes()
			box := &permitBox{}
			fenced := 0
			fencer := mocks.NewMockFencer(ctrl)
			fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).DoAndReturn(func(context.Context, []string, string) ([]ports.StoppedProcess, error) {
				fenced++
				if d := box.last(t).Deadline("rw"); d > clock.read() {
					t.Errorf("fenced while the permit lets rw write until %s (now %s)", d, clock.read())
				}
				return []ports.StoppedProcess{{PID: 7, Command: "db"}}, nil
			}).Times(1)

			st := primaryState("rw", "a", "b")
			over := st
			over.Replicas = append([]replica.Replica(nil), st.Replicas...)
			if err := replica.Takeover(&over, "b", "a", 1); err != nil {
				t.Fatal(err)
			}
			cluster := fakecluster.New()
			if _, err := cluster.Create(ctx, over); err != nil {
				t.Fatal(err)
			}
			vols := NewVolumes()
			if restarted {
				vols.Saw(over)
			} else {
				vols.Saw(st)
			}
			g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, nil, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))
			if err := g.RenewOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if !restarted {
				g.Check(ctx)
				vols.Saw(over)
			}
			clock.set(time.Second)
			g.Check(ctx)
			if fenced != 1 {
				t.Fatalf("fenced %d times", fenced)
			}
			clock.set(2 * time.Second)
			if err := g.RenewOnce(ctx); err != nil {
				t.Fatal(err)
			}
			if d, want := box.last(t).Deadline("rw"), timing.Held(2*time.Second); d != want {
				t.Fatalf("after the fence rw has the deadline %s, want the lease's end %s", d, want)
			}
		})
	}
}

// A copy fenced as unknown (the lease ran out with no state of it in the
// view) is never published Forever while the guard keeps it fenced, even
// once the view shows its primary here with no taker: its deadline is the
// lease's. The lease back, it is given back, and then Forever again.
func TestAnUnknownCopyTheGuardFencedIsNeverForever(t *testing.T) {
	ctrl := gomock.NewController(t)
	ctx := context.Background()
	clock := &fakeClock{}
	cluster := fakecluster.New()
	single := unackedState("single")
	if _, err := cluster.Create(ctx, single); err != nil {
		t.Fatal(err)
	}
	lease := mocks.NewMockNodeLease(ctrl)
	info := ports.VolumeInfo{ID: "single", MountPath: "/p/single", MountSource: "pool/single", Metadata: map[string]string{ports.MetaReplicationFactor: "2"}}
	store := mocks.NewMockSnapshotStore(ctrl)
	store.EXPECT().ListVolumes(gomock.Any()).Return([]ports.VolumeInfo{info}, nil).AnyTimes()
	store.EXPECT().GetVolume(gomock.Any(), volume.ID("single")).Return(info, nil).AnyTimes()
	mounts := mocks.NewMockMountTable(ctrl)
	mounts.EXPECT().MountsOf("pool/single").Return([]string{"/p/single", "/k/pods/x/mount"}, nil).AnyTimes()
	mounts.EXPECT().MountAt("/k/pods/x/mount").Return(ports.Mount{Source: "pool/single"}, true, nil).AnyTimes()
	fencer := mocks.NewMockFencer(ctrl)
	fencer.EXPECT().Fence(gomock.Any(), gomock.Any(), gomock.Any()).Return(nil, nil).Times(1)
	eff := mocks.NewMockFailoverEffects(ctrl)
	eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("single")).Return([]string{"ns/app-0"}, nil).Times(1)
	vols := NewVolumes()
	box := &permitBox{}
	g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store, mounts, fencer, eff, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))

	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	clock.set(5 * time.Second) // the lease (until 4.5 s) ran out
	lease.EXPECT().Renew(gomock.Any()).Return(errors.New("connection refused"))
	_ = g.RenewOnce(ctx)
	g.Check(ctx)
	if g.Fenced("single") != liveness.ReasonUnknown {
		t.Fatal("the unknown copy was not fenced")
	}
	vols.Saw(single) // the view learns it: primary here, nobody acknowledged
	g.Check(ctx)
	if d := box.last(t).Deadline("single"); d > clock.read() {
		t.Fatalf("a copy the guard keeps fenced may write until %s (now %s)", d, clock.read())
	}
	clock.set(6 * time.Second)
	lease.EXPECT().Renew(gomock.Any()).Return(nil)
	if err := g.RenewOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if d := box.last(t).Deadline("single"); d != timing.Held(6*time.Second) {
		t.Fatalf("the lease renewed, single may write until %s, want the lease's end", d)
	}
	g.Check(ctx) // given back
	g.Check(ctx)
	if d := box.last(t).Deadline("single"); d != liveness.Forever {
		t.Fatalf("given back, single (nobody acknowledged) may write until %s, want Forever", d)
	}
}

// The record of a volume its watchdog fenced goes with main's give-back
// whether or not the node is still the volume's primary, and its pods here
// are restarted whoever the primary is, as an unknown copy's: the fence
// covered every mount of the copy, and the watchdog of a secondary fences
// too before its volume manager's first read of the state (read-only pods
// then sit on the placeholder, and no takeover deletes them); a volume
// taken over from here has had its pods deleted by the takeover already
// (deleting them again changes nothing).
func TestAWatchdogsRecordIsGivenBackWhoeverThePrimaryIs(t *testing.T) {
	over := primaryState("rep", "a", "b")
	if err := replica.Takeover(&over, "b", "a", 1); err != nil {
		t.Fatal(err)
	}
	secondary := primaryState("rep", "a", "b") // b the active primary, a a taker
	secondary.Primary = "b"
	secondary.Replicas[0].Active, secondary.Replicas[1].Active = false, true
	secondary.Replicas[0].Taker, secondary.Replicas[1].Taker = true, false
	for name, st := range map[string]replica.State{"taken over from here": over, "a secondary here": secondary} {
		t.Run(name, func(t *testing.T) {
			ctrl := gomock.NewController(t)
			ctx := context.Background()
			clock := &fakeClock{}
			cluster := fakecluster.New()
			if _, err := cluster.Create(ctx, st); err != nil {
				t.Fatal(err)
			}
			lease := mocks.NewMockNodeLease(ctrl)
			lease.EXPECT().Renew(gomock.Any()).Return(nil).AnyTimes()
			info := ports.VolumeInfo{ID: "rep", MountPath: "/p/rep", MountSource: "pool/rep"}
			store := mocks.NewMockSnapshotStore(ctrl)
			store.EXPECT().GetVolume(gomock.Any(), volume.ID("rep")).Return(info, nil).AnyTimes()
			mounts := mocks.NewMockMountTable(ctrl)
			mounts.EXPECT().MountsOf("pool/rep").Return([]string{"/p/rep"}, nil).AnyTimes() // the watchdog covered the pod's mount
			vols := NewVolumes()
			vols.Saw(st)
			box := &permitBox{}
			_ = box.Record("rep", "the deadline passed")
			eff := mocks.NewMockFailoverEffects(ctrl)
			fencer := mocks.NewMockFencer(ctrl)
			// The watchdog stopped the holders: the guard's fence kills
			// them before the pods restart.
			gomock.InOrder(
				fencer.EXPECT().Fence(gomock.Any(), []string{"/p/rep"}, "/p/rep").Return(nil, nil).Times(1),
				eff.EXPECT().EvictPods(gomock.Any(), replica.Node("a"), volume.ID("rep")).Return([]string{"ns/reader-0"}, nil).Times(1),
			)
			g := NewGuard(Config{Node: "a", Lease: timing, Lag: 1}, clock.read, lease, vols, NewTakers("a", cluster, zap.NewNop()), store,
				mounts, fencer, eff, nopEvents{}, zap.NewNop(), WithPermits(box, box, nil))
			if err := g.RenewOnce(ctx); err != nil {
				t.Fatal(err)
			}
			g.Check(ctx)
			g.Check(ctx) // once: a second EvictPods fails the mock
			if got, _ := box.Recorded(); len(got) != 0 {
				t.Fatalf("records left: %v", got)
			}
			if got, _ := cluster.Get(ctx, "rep"); got.Primary != st.Primary || got.Epoch != st.Epoch {
				t.Fatalf("the give-back changed the state: %+v", got)
			}
		})
	}
}
