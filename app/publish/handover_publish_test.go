package publish_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/domain/placement"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// newReplNodeWith is node-1 (cfg.Node) with volume v replicated twice in
// the state st.
func newReplNodeWith(t *testing.T, st replica.State) (replNode, *fakecluster.Store) {
	ctrl := gomock.NewController(t)
	r := replNode{store: mocks.NewMockSnapshotStore(ctrl), mnt: mocks.NewMockMounter(ctrl),
		work: mocks.NewMockReplicaWorkload(ctrl), control: mocks.NewMockReplicaControl(ctrl), events: &events{}}
	states := fakecluster.New()
	if _, err := states.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	r.n = publish.New(cfg, r.store, r.mnt, zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: states, Control: r.control, Workload: r.work, Events: r.events, Wait: time.Second}))
	return r, states
}

// The old pod's target on node-1.
const oldPodTarget = "/var/lib/kubelet/pods/old/mount"

// A Deployment's rolling update (maxUnavailable 0) starts the new pod
// before the old one stops; the volume is usable only on the active
// primary's node, so the new pod lands there, next to the old one, which
// still has the volume mounted. The new pod's publish acquires (a no-op:
// node-1 already is the active primary) and then remounts the dataset
// under the old pod's bind mount. The port answers ErrBusy for that
// (SnapshotStore.Remount), so the publish answers Aborted on every retry
// and the rollout waits for ever; the ZFS adapter instead unmounts the old
// pod's bind mount (adapters/zfs remount_binds_test.go).
//
// Nothing was received since the old pod's publish (this node has been
// the writer all along, and that publish recorded its remount of epoch 2
// with the volume): there is nothing stale to drop, and the new pod must
// get the volume.
func TestASecondPodOnThePrimarysNodeGetsTheVolumeWithoutARemountUnderTheFirst(t *testing.T) {
	r, _ := newReplNodeWith(t, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 2, Primary: cfg.Node, Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 3, SnapshotEpoch: 2, Ready: true, Active: true}, {Node: "node-2", Snapshot: 3, SnapshotEpoch: 2, Ready: true}}})
	vol := vol
	vol.Metadata = map[string]string{ports.MetaRemountedEpoch: "2"}
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).AnyTimes()
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil).AnyTimes()
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath, oldPodTarget}, nil).AnyTimes()
	r.mnt.EXPECT().MountAt(oldPodTarget).Return(ports.Mount{Source: vol.MountSource}, true, nil).AnyTimes()
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, true).Return(nil).AnyTimes()
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1, Outside: 1, OnNode: true}, nil).AnyTimes()
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil).AnyTimes()
	r.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).Return(nil).AnyTimes()
	// As the port says: the old pod's bind mount uses the filesystem.
	r.store.EXPECT().Remount(gomock.Any(), volume.ID("v")).Return(ports.ErrBusy).AnyTimes()
	r.mnt.EXPECT().BindMount(gomock.Any(), vol.MountPath, podTargetParts, false).Return(nil).AnyTimes()
	for attempt := 1; attempt <= 3; attempt++ { // the kubelet retries
		err := r.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: podTarget, Capability: rwCap})
		if err == nil {
			return
		}
		if attempt == 3 {
			t.Fatalf("the new pod's publish on the primary's node, next to the old pod: %v (on every retry)", err)
		}
	}
}

// workloadLog records what the node asked of the workload.
type workloadLog struct {
	mu  sync.Mutex
	out []bool // SetOutside calls for node-1, in order
}

func (w *workloadLog) setOutside(outside bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.out = append(w.out, outside)
}

func (w *workloadLog) last() (bool, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.out) == 0 {
		return false, false
	}
	return w.out[len(w.out)-1], true
}

// Unpublish on node-1, its primary's term ended (Release recorded the
// final snapshot), and then the pod's move back into the ReplicaSet fails
// once (an API server hiccup, a conflict on the pod). Unpublish answers
// OK: the kubelet never calls again, and nothing else ever moves a
// secondary's pod back in (the Adopter starts missing pods only). The pod
// stays outside the ReplicaSet for good, under the primary's budget
// (maxUnavailable 0): no drain can ever evict it, and the ReplicaSet is
// sized around it.
func TestAnUnpublishWhosePodCouldNotRejoinTheWorkloadIsRetried(t *testing.T) {
	r, _ := newReplNodeWith(t, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 2, Primary: cfg.Node, Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 4, SnapshotEpoch: 2, Ready: true}, {Node: "node-2", Snapshot: 3, SnapshotEpoch: 2, Ready: true}}})
	log := &workloadLog{}
	failOnce := true
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).AnyTimes()
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil).AnyTimes()
	r.mnt.EXPECT().RemoveDir(podTargetParts).Return(false, nil).AnyTimes()
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath}, nil).AnyTimes()
	r.control.EXPECT().Release(gomock.Any(), volume.ID("v"), time.Second).Return(nil).AnyTimes()
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1, Outside: 1, OutsideOnNode: true, OnNode: true}, nil).AnyTimes()
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil).AnyTimes()
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, gomock.Any()).DoAndReturn(
		func(_ any, _ volume.ID, _ replica.Node, outside bool) error {
			if failOnce {
				failOnce = false
				return errors.New("pods \"ferry-v-1234\": the server was unable to return a response in the time allotted")
			}
			log.setOutside(outside)
			return nil
		}).AnyTimes()
	err := r.n.Unpublish(ctx, "v", podTarget)
	if err != nil {
		// Failed: the kubelet retries the unpublish, which releases again
		// (a no-op) and moves the pod back in.
		if err := r.n.Unpublish(ctx, "v", podTarget); err != nil {
			t.Fatalf("retried unpublish: %v", err)
		}
	}
	if outside, ok := log.last(); !ok || outside {
		t.Fatalf("unpublish answered %v, and node-1's pod (a secondary now) was never moved back into the ReplicaSet", err)
	}
}

// Unpublish on node-1 while its volume manager is not running (its
// container restarting; the control socket refuses): the state says
// node-1 is not the active primary, so there is no final snapshot to
// take, and Unpublish answers OK, without moving node-1's pod (labelled
// outside by the publish) back into the ReplicaSet. Nothing moves it back
// later: it stays under the primary's budget, undrainable.
func TestAnUnpublishWithoutAVolumeManagerStillMovesThePodBackIn(t *testing.T) {
	r, _ := newReplNodeWith(t, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 3, Primary: "node-2", Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 4, SnapshotEpoch: 2, Ready: true}, {Node: "node-2", Snapshot: 4, SnapshotEpoch: 2, Ready: true, Active: true}}})
	log := &workloadLog{}
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).AnyTimes()
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil).AnyTimes()
	r.mnt.EXPECT().RemoveDir(podTargetParts).Return(true, nil).AnyTimes()
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath}, nil).AnyTimes()
	r.control.EXPECT().Release(gomock.Any(), volume.ID("v"), time.Second).Return(
		errors.Join(errors.New("no volume manager of volume v runs on node-1"), ports.ErrNotFound)).AnyTimes()
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Secondaries: 0, Running: 0, Outside: 2, OutsideOnNode: true, OnNode: true}, nil).AnyTimes()
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil).AnyTimes()
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, gomock.Any()).DoAndReturn(
		func(_ any, _ volume.ID, _ replica.Node, outside bool) error {
			log.setOutside(outside)
			return nil
		}).AnyTimes()
	err := r.n.Unpublish(ctx, "v", podTarget)
	if outside, ok := log.last(); err == nil && (!ok || outside) {
		t.Fatal("unpublish answered OK without moving node-1's pod (outside since its publish) back into the ReplicaSet")
	}
}

// An unpublish on node-1 whose pod never left the ReplicaSet (the
// publish was refused before SetOutside: no live pod yet, the kubelet
// marked the mount uncertain, and the pod was then deleted; or a
// read-only publish): rejoin resizes "for a pod about to move in" (-1)
// all the same. With the active primary and another node's publish
// outside, the ReplicaSet is raised one above the copies the volume
// wants, and starts a pod for a surplus copy (a full transfer that the
// primary's daemon scales away again).
func TestAnUnpublishWhosePodNeverLeftTheWorkloadDoesNotRaiseIt(t *testing.T) {
	r, _ := newReplNodeWith(t, replica.State{Volume: "v", ReplicationFactor: 3, Epoch: 3, Primary: "node-2", Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 4, SnapshotEpoch: 3, Ready: true}, {Node: "node-2", Snapshot: 4, SnapshotEpoch: 3, Ready: true, Active: true},
		{Node: "node-3", Snapshot: 4, SnapshotEpoch: 3, Ready: true}}})
	r.store.EXPECT().GetVolume(gomock.Any(), volume.ID("v")).Return(vol, nil).AnyTimes()
	r.mnt.EXPECT().MountAt(podTarget).Return(ports.Mount{}, false, nil).AnyTimes()
	r.mnt.EXPECT().RemoveDir(podTargetParts).Return(true, nil).AnyTimes()
	r.mnt.EXPECT().MountsOf(vol.MountSource).Return([]string{vol.MountPath}, nil).AnyTimes()
	r.control.EXPECT().Release(gomock.Any(), volume.ID("v"), time.Second).Return(nil).AnyTimes()
	// node-1's pod is in the ReplicaSet (its one pod); node-2's (the
	// primary) and node-3's (publishing) are outside.
	r.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Secondaries: 1, Running: 1, Outside: 2, OnNode: true}, nil).AnyTimes()
	r.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, false).Return(nil).AnyTimes()
	r.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).DoAndReturn(
		func(_ any, _ volume.ID, o placement.Objects, _ time.Duration) error {
			if o.Secondaries+2 > 3 {
				t.Errorf("the ReplicaSet is raised to %d while 2 pods run outside it: %d copies for replicationFactor 3", o.Secondaries, o.Secondaries+2)
			}
			return nil
		}).AnyTimes()
	if err := r.n.Unpublish(ctx, "v", podTarget); err != nil {
		t.Fatal(err)
	}
}
