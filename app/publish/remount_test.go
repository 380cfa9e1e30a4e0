package publish_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/adapters/fakecluster"
	"github.com/ferry-csi/ferry/app/publish"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// copyHost is node-1's copy of volume v as a publish sees it, across
// daemon restarts: the volume's metadata (kept with it, as a ZFS user
// property outlives the daemon), the pods' bind mounts, and whether the
// mounted filesystem may show pages cached before a receive (zfs-fuse):
// set by a receive, cleared by a remount, which is refused (ErrBusy)
// while a pod's mount uses the filesystem. A read/write mount over stale
// pages fails the test.
type copyHost struct {
	ports.SnapshotStore // only the calls a publish makes are implemented
	t                   *testing.T
	mu                  sync.Mutex
	meta                map[string]string
	targets             map[string]bool // target path -> read-only
	stale               bool
	remounts            int // remounts done (refusals not counted)
	unlocks             int // write locks lifted
	// gate, when set, holds each remount until it is closed, after
	// saying so on entered.
	gate, entered chan struct{}
}

func newCopyHost(t *testing.T) *copyHost {
	return &copyHost{t: t, meta: map[string]string{}, targets: map[string]bool{}}
}

// receive is the volume manager receiving a snapshot into the mounted
// copy while it is a secondary.
func (h *copyHost) receive() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stale = true
}

// podGone is a pod's mount going away (its unpublish).
func (h *copyHost) podGone(target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.targets, target)
}

func (h *copyHost) counts() (remounts int, record string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.remounts, h.meta[ports.MetaRemountedEpoch]
}

func (h *copyHost) GetVolume(_ context.Context, id volume.ID) (ports.VolumeInfo, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	info := vol
	info.Metadata = maps.Clone(h.meta)
	return info, nil
}

func (h *copyHost) SetMetadata(_ context.Context, _ volume.ID, m map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	maps.Copy(h.meta, m)
	return nil
}

// LockWrites and UnlockWrites are the watchdog's write lock, by its
// record; unlocks counts the lifts.
func (h *copyHost) LockWrites(_ context.Context, _ volume.ID, why string) error {
	return h.SetMetadata(ctx, "v", map[string]string{ports.MetaWritesLocked: why})
}

func (h *copyHost) UnlockWrites(context.Context, volume.ID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.meta, ports.MetaWritesLocked)
	h.unlocks++
	return nil
}

func (h *copyHost) LoadKey(context.Context, volume.ID, volume.Key) error { return ports.ErrInvalid }
func (h *copyHost) UnloadKey(context.Context, volume.ID) error           { return nil }

func (h *copyHost) Remount(context.Context, volume.ID) error {
	if h.gate != nil {
		h.entered <- struct{}{}
		<-h.gate
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.targets) > 0 {
		return fmt.Errorf("remount volume v: mounted at %v: %w", slices.Sorted(maps.Keys(h.targets)), ports.ErrBusy)
	}
	h.stale = false
	h.remounts++
	return nil
}

func (h *copyHost) MountAt(target string) (ports.Mount, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ro, ok := h.targets[target]
	if !ok {
		return ports.Mount{}, false, nil
	}
	return ports.Mount{Source: vol.MountSource, ReadOnly: ro}, true, nil
}

func (h *copyHost) MountsOf(source string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string{vol.MountPath}, slices.Sorted(maps.Keys(h.targets))...), nil
}

func (h *copyHost) BindMount(_ context.Context, source string, target volume.Target, readOnly bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !readOnly && h.stale {
		h.t.Errorf("%s mounted read/write over pages cached before a receive", target.Path())
	}
	h.targets[target.Path()] = readOnly
	return nil
}

func (h *copyHost) Unmount(_ context.Context, target volume.Target) error {
	h.podGone(target.Path())
	return nil
}

func (h *copyHost) RemoveDir(volume.Target) (bool, error) { return true, nil }

func (h *copyHost) Stats(string) (ports.FsStats, error) { return ports.FsStats{}, nil }

// remountWorld is node-1 with volume v replicated twice (node-2 the active
// primary of epoch 1), the copy on node-1 received into since it was last
// mounted, and a daemon that can be restarted (a new publish.Service over the
// same copy and shared state).
type remountWorld struct {
	t       *testing.T
	host    *copyHost
	states  *fakecluster.Store
	work    *mocks.MockReplicaWorkload
	control *mocks.MockReplicaControl
	events  *events
	n       *publish.Service
}

func newRemountWorld(t *testing.T) *remountWorld {
	ctrl := gomock.NewController(t)
	w := &remountWorld{t: t, host: newCopyHost(t), states: fakecluster.New(), events: &events{},
		work: mocks.NewMockReplicaWorkload(ctrl), control: mocks.NewMockReplicaControl(ctrl)}
	if _, err := w.states.Create(ctx, replica.State{Volume: "v", ReplicationFactor: 2, Epoch: 1, Primary: "node-2", Replicas: []replica.Replica{
		{Node: cfg.Node, Snapshot: 3, SnapshotEpoch: 1, Ready: true, Taker: true}, {Node: "node-2", Snapshot: 3, SnapshotEpoch: 1, Ready: true, Active: true}}}); err != nil {
		t.Fatal(err)
	}
	w.work.EXPECT().SetOutside(gomock.Any(), volume.ID("v"), cfg.Node, gomock.Any()).Return(nil).AnyTimes()
	w.work.EXPECT().Status(gomock.Any(), volume.ID("v"), cfg.Node).Return(ports.WorkloadStatus{Outside: 2, OutsideOnNode: true, OnNode: true}, nil).AnyTimes()
	w.work.EXPECT().Apply(gomock.Any(), volume.ID("v"), gomock.Any(), time.Duration(0)).Return(nil).AnyTimes()
	// The volume manager: once another replica is no longer active,
	// node-1 becomes the primary by compare-and-swap (a no-op when it
	// already is).
	w.control.EXPECT().Acquire(gomock.Any(), volume.ID("v"), time.Second).DoAndReturn(func(context.Context, volume.ID, time.Duration) error {
		_, err := w.states.Update(ctx, "v", func(s *replica.State) error {
			for i := range s.Replicas {
				if s.Replicas[i].Node != cfg.Node {
					s.Replicas[i].Active = false
				}
			}
			return replica.Promote(s, cfg.Node)
		})
		return err
	}).AnyTimes()
	w.host.receive()
	w.restart()
	return w
}

// restart is a new daemon process: nothing of the last one's memory.
func (w *remountWorld) restart() {
	w.n = publish.New(cfg, w.host, w.host, zap.NewNop(), publish.WithReplication(publish.Replication{Cluster: w.states, Control: w.control, Workload: w.work, Events: w.events, Wait: time.Second, WriteLock: w.host}))
}

func target(pod string) string { return path.Join("/var/lib/kubelet/pods", pod, "mount") }

func (w *remountWorld) publish(pod string, readOnly bool) error {
	return w.n.Publish(ctx, publish.Request{VolumeID: "v", TargetPath: target(pod), ReadOnly: readOnly, Capability: rwCap})
}

// wantRefused: the read/write publish of pod answers ErrPending (the
// kubelet retries) and mounts nothing there.
func (w *remountWorld) wantRefused(pod string) {
	w.t.Helper()
	if err := w.publish(pod, false); !errors.Is(err, refusal.ErrPending) {
		w.t.Fatalf("read/write publish of %s next to a mount of the copy from before its receives: %v, want ErrPending (remount refused, retried)", pod, err)
	}
	if _, mounted, _ := w.host.MountAt(target(pod)); mounted {
		w.t.Fatalf("%s mounted although its remount was refused", pod)
	}
}

// wantRefusals: each refusal said why in an event naming the mount that
// holds it.
func (w *remountWorld) wantRefusals(n int, mount string) {
	w.t.Helper()
	got := w.events.withReason("RemountRefused")
	if len(got) != n {
		w.t.Fatalf("events %v: want %d RemountRefused", w.events.reasons(), n)
	}
	for _, e := range got {
		if e.Type != ports.EventWarning || !strings.Contains(e.Message, mount) {
			w.t.Fatalf("event %+v: want a warning naming %s", e, mount)
		}
	}
}

// Issue 21.7: a read-only pod on node-1 mounted the copy while it was a
// secondary being received into; node-2 is lost and node-1 takes over
// (the primary now, without any publish here). The writer's publish must
// not skip the remount because another pod uses the copy: it is refused
// and retried until the read-only pod is gone, then remounts.
func TestAPublishAfterATakeoverWithAReadOnlyPodHereNeverSkipsTheRemount(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.publish("ro", true); err != nil {
		t.Fatal(err)
	}
	w.host.receive() // replication goes on under the read-only pod
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	w.wantRefused("rw")
	w.wantRefused("rw") // the kubelet's retry, the read-only pod still there
	w.wantRefusals(2, target("ro"))
	w.host.podGone(target("ro"))
	if err := w.publish("rw", false); err != nil {
		t.Fatal(err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "2" {
		t.Fatalf("%d remounts, record %q: want one, recorded for epoch 2", n, rec)
	}
}

// Issue 21.7: a remount refused (a read-only pod's mount), then the
// daemon restarts before the kubelet's retry: the retry still refuses,
// although node-1 is the primary by then and another pod uses the copy
// (what the last process knew is not needed: nothing was recorded).
func TestADaemonRestartBetweenARefusedRemountAndTheRetryStillRefuses(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.publish("ro", true); err != nil {
		t.Fatal(err)
	}
	w.wantRefused("rw") // node-1 becomes the primary of epoch 2 here
	w.restart()
	w.wantRefused("rw")
	w.wantRefusals(2, target("ro"))
	w.host.podGone(target("ro"))
	w.restart()
	if err := w.publish("rw", false); err != nil {
		t.Fatal(err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "2" {
		t.Fatalf("%d remounts, record %q: want one, recorded for epoch 2", n, rec)
	}
}

// A second read/write pod on the primary's node in the same term (a
// rolling update), after a daemon restart too: the remount of this term
// is recorded with the copy, nothing was received since, so nothing is
// remounted under the first pod and the second gets the volume.
func TestASecondPublishInTheSameTermDoesNotRemountUnderTheFirstPod(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.publish("old", false); err != nil {
		t.Fatal(err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "2" {
		t.Fatalf("first publish of epoch 2: %d remounts, record %q: want one, recorded for epoch 2", n, rec)
	}
	w.restart()
	if err := w.publish("new", false); err != nil {
		t.Fatalf("second pod's publish in the same term: %v", err)
	}
	if n, _ := w.host.counts(); n != 1 {
		t.Fatalf("%d remounts: the second publish of the term remounted", n)
	}
}

// A remount recorded in an earlier term here is no evidence for this one:
// node-1 was the primary of epoch 2, released, node-2 wrote in epoch 3
// and node-1 received it under a read-only pod; node-1 takes over
// (epoch 4): the writer's publish refuses until the read-only pod goes.
func TestARemountOfAnEarlierTermIsRemountedAgain(t *testing.T) {
	w := newRemountWorld(t)
	w.host.meta[ports.MetaRemountedEpoch] = "2"
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error {
		s.Epoch, s.Replicas[0].SnapshotEpoch, s.Replicas[1].SnapshotEpoch = 3, 3, 3
		return replica.Acknowledge(s, "node-2", 3, replica.Candidates(*s, "node-2"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.publish("ro", true); err != nil {
		t.Fatal(err)
	}
	w.host.receive()
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	w.wantRefused("rw")
	w.wantRefusals(1, target("ro"))
	w.host.podGone(target("ro"))
	if err := w.publish("rw", false); err != nil {
		t.Fatal(err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "4" {
		t.Fatalf("%d remounts, record %q: want one, recorded for epoch 4", n, rec)
	}
}

// The copy a takeover made the primary here is remounted at once
// (PrepareWriter, beside the pods' rescheduling): the writer's publish
// that follows finds it recorded and remounts nothing.
func TestATakeoverRemountsTheCopyBeforeTheWritersPublish(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.n.PrepareWriter(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.host.counts(); n != 0 {
		t.Fatalf("%d remounts of a secondary's copy: nothing is prepared before a takeover", n)
	}
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := w.n.PrepareWriter(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "2" {
		t.Fatalf("prepared: %d remounts, record %q: want one, recorded for epoch 2", n, rec)
	}
	if err := w.publish("rw", false); err != nil {
		t.Fatal(err)
	}
	if n, _ := w.host.counts(); n != 1 {
		t.Fatalf("%d remounts: the publish remounted a copy already prepared", n)
	}
}

// A publish arriving while the copy is being prepared waits for it (not
// refused, which would cost the kubelet's backoff), then mounts the
// remounted copy without a second remount.
func TestAPublishDuringThePreparationWaitsForIt(t *testing.T) {
	w := newRemountWorld(t)
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	w.host.gate, w.host.entered = make(chan struct{}), make(chan struct{}, 1)
	prepared := make(chan error, 1)
	go func() { prepared <- w.n.PrepareWriter(ctx, "v") }()
	<-w.host.entered
	published := make(chan error, 1)
	go func() { published <- w.publish("rw", false) }()
	select {
	case err := <-published:
		t.Fatalf("the publish answered %v while the copy was being remounted: it must wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(w.host.gate)
	if err := <-prepared; err != nil {
		t.Fatal(err)
	}
	if err := <-published; err != nil {
		t.Fatalf("publish after the preparation: %v", err)
	}
	if n, rec := w.host.counts(); n != 1 || rec != "2" {
		t.Fatalf("%d remounts, record %q: want one, recorded for epoch 2", n, rec)
	}
}

// A read-only pod here holds the copy: the preparation's remount is
// refused without an event (the publish raises it when it is refused in
// turn), and the writer's publish still never skips the remount.
func TestAPreparationRefusedLeavesTheRemountToThePublish(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.publish("ro", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := w.n.PrepareWriter(ctx, "v"); !errors.Is(err, refusal.ErrPending) {
		t.Fatalf("preparation next to a read-only pod: %v, want the remount refused (ErrPending)", err)
	}
	w.wantRefusals(0, "")
	w.wantRefused("rw")
	w.wantRefusals(1, target("ro"))
}

// Issue 21.11: node-1's volume manager's watchdog locked its copy's writes
// (its daemon was down while it was the primary); node-1 is a secondary
// now, then takes the volume over. A read-only publish leaves the lock; the
// takeover's preparation lifts it, once, before the writer's publish
// (which then finds nothing to lift): the new writer can write.
func TestATakeoverLiftsTheWriteLockAWatchdogLeftOnTheCopy(t *testing.T) {
	w := newRemountWorld(t)
	if err := w.host.LockWrites(ctx, "v", "fenced by its volume manager's watchdog"); err != nil {
		t.Fatal(err)
	}
	if err := w.publish("ro", true); err != nil {
		t.Fatal(err)
	}
	w.host.podGone(target("ro"))
	if info, _ := w.host.GetVolume(ctx, "v"); info.Metadata[ports.MetaWritesLocked] == "" {
		t.Fatal("a read-only publish of a secondary's copy lifted its write lock")
	}
	if _, err := w.states.Update(ctx, "v", func(s *replica.State) error { return replica.Takeover(s, cfg.Node, "node-2", 1) }); err != nil {
		t.Fatal(err)
	}
	if err := w.n.PrepareWriter(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if info, _ := w.host.GetVolume(ctx, "v"); info.Metadata[ports.MetaWritesLocked] != "" {
		t.Fatal("the new primary's copy is still locked after its preparation")
	}
	if err := w.publish("rw", false); err != nil {
		t.Fatal(err)
	}
	if w.host.unlocks != 1 {
		t.Fatalf("%d lifts, want one", w.host.unlocks)
	}
}
