package publish_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

type replNode struct {
	n       *publish.Service
	store   *mocks.MockSnapshotStore
	mnt     *mocks.MockMounter
	work    *mocks.MockReplicaWorkload
	control *mocks.MockReplicaControl
	events  *events
	states  *fakecluster.Store
}

// newReplNode is node-1 (cfg.Node) with volume v replicated twice: node-2
// is the active primary of epoch 1 and node-1 a ready secondary.
func newReplNode(t *testing.T) replNode {
	ctrl := gomock.NewController(t)
	r := replNode{store: mocks.NewMockSnapshotStore(ctrl), mnt: mocks.NewMockMounter(ctrl),
		work: mocks.NewMockReplicaWorkload(ctrl), control: mocks.NewMockReplicaControl(ctrl), events: &events{}}
	states := fakecluster.New()
	if _, err := states.Create(ctx, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "node-2", Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 3, SnapshotEpoch: 1, Ready: true}, {Node: "node-2", Snapshot: 3, SnapshotEpoch: 1, Ready: true, Active: true}}}); err != nil {
		t.Fatal(err)
	}
	r.n = publish.New(cfg, r.store, r.mnt, zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: states, Control: r.control, Workload: r.work, Events: r.events, Wait: time.Second}))
	r.states = states
	return r
}

// promote is an Acquire whose promotion lands in the shared state: node-2
// stepped down, node-1 is the active primary of the next epoch.
func (r replNode) promote(context.Context, volume.ID, time.Duration) error {
	_, err := r.states.Update(ctx, "v", func(s *replica.State) error {
		for i := range s.Replicas {
			if s.Replicas[i].Node != cfg.Node {
				s.Replicas[i].Active = false
			}
		}
		return replica.Promote(s, cfg.Node)
	})
	return err
}

func secondaries(n int) gomock.Matcher {
	return gomock.Cond(func(o placement.Objects) bool { return o.Secondaries == n })
}

var rwCap = volume.Capability{Mode: volume.SingleNodeWriter}

// A read/write publish: the pod leaves the workload, the workload is sized
// without it (two pods outside: the primary's and this one), the replica
// becomes the primary, its filesystem is remounted (nothing cached from
// before what it received), and only then is the volume mounted.
func TestAReadWritePublishMakesTheReplicaThePrimaryBeforeMounting(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(2)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	gomock.InOrder(
		r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, true).Return(nil),
		r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Secondaries: 1, Running: 0, Outside: 2, OnNode: true}, nil),
		r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), secondaries(0), time.Duration(0)).Return(nil),
		r.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).DoAndReturn(r.promote),
		r.store.EXPECT().Remount(gomock.Any(), volume.ID("v")).Return(nil),
		// The remount of epoch 2 is recorded with the volume.
		r.store.EXPECT().SetMetadata(gomock.Any(), volume.ID("v"), map[string]string{ports.MetaRemountedEpoch: "2"}).Return(nil),
		r.mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, false).Return(nil),
	)
	if err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap}); err != nil {
		t.Fatal(err)
	}
}

// While another node stays active past the wait, nothing is mounted, the
// pod rejoins the workload (raised first) and the kubelet is told to retry.
func TestAPublishThatCannotBecomePrimaryMountsNothingAndRejoins(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	gomock.InOrder(
		r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, true).Return(nil),
		r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OnNode: true}, nil),
		r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), secondaries(0), time.Duration(0)).Return(nil),
		r.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).Return(errors.Join(errors.New("node-2 is the active primary of epoch 1"), ports.ErrNotPrimary)),
		r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OutsideOnNode: true, OnNode: true}, nil),
		r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), secondaries(1), time.Duration(0)).Return(nil),
		r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, false).Return(nil),
	)
	err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap})
	if !errors.Is(err, ports.ErrNotPrimary) {
		t.Fatalf("publish while node-2 stays active: %v, want ErrNotPrimary", err)
	}
	if got := r.events.reasons(); len(got) != 1 || got[0] != "PublishWaiting" {
		t.Fatalf("events %v, want PublishWaiting", got)
	}
}

// A read-only publish asks nothing of the replicas.
func TestAReadOnlyPublishOfAReplicatedVolumeAcquiresNothing(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	r.mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, true).Return(nil)
	if err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, ReadOnly: true, Capability: rwCap}); err != nil {
		t.Fatal(err)
	}
}

// A node without a copy gets none made on the fly: FailedPrecondition, and
// an event naming where the volume may be used.
func TestAPublishWhereNoReplicaIsIsAPreconditionFailure(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(ports.VolumeInfo{}, notFound("v"))
	err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap})
	if !errors.Is(err, refusal.ErrPrecondition) {
		t.Fatalf("publish without a local copy: %v, want ErrPrecondition", err)
	}
	if got := r.events.reasons(); len(got) != 1 || got[0] != "NoReplicaHere" {
		t.Fatalf("events %v, want NoReplicaHere", got)
	}
}

// Unpublish of the last target: the final snapshot is recorded (Release)
// before the answer, then the pod rejoins the workload, raised first.
func TestUnpublishOfTheLastTargetReleasesThenRejoins(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	gomock.InOrder(
		r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{Source: vol.MountSource}, true, nil),
		r.mnt.EXPECT().Unmount(gomock.Any(), podTargetParts).Return(nil),
		r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil),
		r.mnt.EXPECT().RemoveDir(podTargetParts).Return(true, nil),
		r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath}, nil),
		r.control.EXPECT().Release(gomock.Any(), volume.ID("v"), time.Second).Return(nil),
		r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OutsideOnNode: true, OnNode: true}, nil),
		r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), secondaries(1), time.Duration(0)).Return(nil),
		r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, false).Return(nil),
	)
	if err := r.n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatal(err)
	}
}

// Another target on this node still shows the volume: the primary stays.
func TestUnpublishWhileAnotherTargetHoldsTheVolumeReleasesNothing(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	r.mnt.EXPECT().RemoveDir(podTargetParts).Return(false, nil)
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath, "/var/lib/kubelet/pods/y/mount"}, nil)
	if err := r.n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatal(err)
	}
}

// A release that does not finish is an error: the kubelet retries the
// unpublish (the target is gone by then), which releases again.
func TestAnUnfinishedReleaseFailsTheUnpublish(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	r.mnt.EXPECT().RemoveDir(podTargetParts).Return(false, nil)
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath}, nil)
	r.control.EXPECT().Release(gomock.Any(), volume.ID("v"), time.Second).Return(errors.Join(context.DeadlineExceeded, ports.ErrNotPrimary))
	if err := r.n.Unpublish(ctx, "v", podTarget); !errors.Is(err, ports.ErrNotPrimary) {
		t.Fatalf("unpublish whose release did not finish: %v", err)
	}
}

// A survivor took the volume over after its node was lost: the replica
// here is already the active primary when the pod's publish comes, but it
// was received into as a secondary, so it is remounted before the mount
// (no other pod here uses it).
func TestAPublishAfterATakeoverRemountsAlthoughTheReplicaIsAlreadyActive(t *testing.T) {
	r := newReplNode(t)
	if _, err := r.states.Update(ctx, "v", func(s *replica.State) error { return ackThenTakeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(2)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil)
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, true).Return(nil)
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OutsideOnNode: true, OnNode: true}, nil)
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil)
	gomock.InOrder(
		r.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).Return(nil),
		r.store.EXPECT().Remount(gomock.Any(), volume.ID("v")).Return(nil),
		r.store.EXPECT().SetMetadata(gomock.Any(), volume.ID("v"), map[string]string{ports.MetaRemountedEpoch: "2"}).Return(nil),
		r.mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, false).Return(nil),
	)
	if err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap}); err != nil {
		t.Fatal(err)
	}
}

// A remount refused after the promotion (another pod's read-only mount)
// is tried again by the retried publish, although the replica is the
// primary by then: nothing is mounted read/write over stale pages.
func TestAPublishWhoseRemountFailedRemountsOnItsRetry(t *testing.T) {
	r := newReplNode(t)
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).Times(4)
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil).Times(2)
	// The refusal's event names the other pod's target.
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath, "/var/lib/kubelet/pods/ro/mount"}, nil)
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, true).Return(nil).Times(2)
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OutsideOnNode: true, OnNode: true}, nil).Times(2)
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil).Times(2)
	r.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).DoAndReturn(r.promote).Times(2)
	gomock.InOrder(
		r.store.EXPECT().Remount(gomock.Any(), volume.ID("v")).Return(ports.ErrBusy),
		r.store.EXPECT().Remount(gomock.Any(), volume.ID("v")).Return(nil),
		r.store.EXPECT().SetMetadata(gomock.Any(), volume.ID("v"), map[string]string{ports.MetaRemountedEpoch: "2"}).Return(nil),
	)
	r.mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, false).Return(nil)
	req := publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap}
	if err := r.n.Publish(ctx, req); !errors.Is(err, refusal.ErrPending) {
		t.Fatalf("publish whose remount was refused: %v, want ErrPending", err)
	}
	if got := r.events.reasons(); len(got) != 1 || got[0] != "RemountRefused" {
		t.Fatalf("events %v, want RemountRefused", got)
	}
	if err := r.n.Publish(ctx, req); err != nil {
		t.Fatal(err)
	}
}
