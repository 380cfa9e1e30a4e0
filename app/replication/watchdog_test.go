package replication_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/replication"
	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/ports/mocks"
)

// permitDesk is the node's permit as a test sets it, its clock, and the
// fence records.
type permitDesk struct {
	mu      sync.Mutex
	permit  liveness.Permit
	err     error
	now     time.Duration
	records map[volume.ID]string
}

func (d *permitDesk) Read() (liveness.Permit, time.Duration, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.permit, d.now, d.err
}

func (d *permitDesk) set(until, now time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.permit, d.now, d.err = liveness.Permit{Until: until, Margin: 500 * time.Millisecond}, now, nil
}

func (d *permitDesk) Record(id volume.ID, reason string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.records == nil {
		d.records = map[volume.ID]string{}
	}
	d.records[id] = reason
	return nil
}

func (d *permitDesk) Recorded() (map[volume.ID]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[volume.ID]string{}
	for k, v := range d.records {
		out[k] = v
	}
	return out, nil
}

func (d *permitDesk) Clear(id volume.ID, _ string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.records, id)
	return nil
}

// mountsOf is a mount table listing, for the volume's source, the points
// the test sets.
type mountsOf struct {
	mu     sync.Mutex
	points []string
}

func (m *mountsOf) MountAt(string) (ports.Mount, bool, error) { return ports.Mount{}, false, nil }
func (m *mountsOf) MountsOf(string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.points...), nil
}
func (m *mountsOf) set(points ...string) { m.mu.Lock(); defer m.mu.Unlock(); m.points = points }

// locked is the reason of the write lock on the volume's copy in store,
// "" when it is not locked.
func locked(t *testing.T, store ports.SnapshotStore) string {
	t.Helper()
	info, err := store.GetVolume(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	return info.Metadata[ports.MetaWritesLocked]
}

// A primary's watchdog: no fence while the deadline is ahead; once it has
// passed, the copy's writes locked, its holders stopped (wherever it is
// mounted: the pod's mount shares its device), a record for the daemon
// and one Fenced event; at every look during the spell the holders are
// stopped again (zfs-fuse lets a file be appended to on a read-only
// dataset), with no second event; a deadline ahead again ends the spell
// and leaves the lock for the daemon to lift; the next deadline passing
// fences again.
func TestAPrimarysWatchdogFencesOnceItsDeadlinePassedAndNotBefore(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	info, err := c.stores["a"].GetVolume(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	pod := "/kubelet/pods/x/volumes/kubernetes.io~csi/pv/mount"
	ctrl := gomock.NewController(t)
	stopper := mocks.NewMockHolderStopper(ctrl)
	desk := &permitDesk{}
	mounts := &mountsOf{points: []string{info.MountPath, pod}}
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: "a", Volume: volID, Poll: time.Second}, desk, desk, func() bool { return false },
		c.stores["a"], mounts, c.stores["a"], stopper, c.events, zap.NewNop())

	desk.set(10*time.Second, 9*time.Second)
	if next := w.Check(ctx); next != 250*time.Millisecond {
		t.Fatalf("looks again in %s, want half the margin", next)
	}
	desk.set(10*time.Second, 9900*time.Millisecond)
	if next := w.Check(ctx); next != 100*time.Millisecond {
		t.Fatalf("looks again in %s, want at the deadline", next)
	}
	if w.Fencing() || len(c.events.reasons()) != 0 || locked(t, c.stores["a"]) != "" {
		t.Fatal("fenced before the deadline")
	}

	desk.set(10*time.Second, 10*time.Second)
	stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return([]ports.StoppedProcess{{PID: 42, Command: "writer"}}, nil)
	w.Check(ctx)
	if !w.Fencing() {
		t.Fatal("not fencing after the deadline")
	}
	if locked(t, c.stores["a"]) == "" {
		t.Fatal("the copy's writes are not locked")
	}
	if got, _ := desk.Recorded(); got[volID] == "" {
		t.Fatal("no record for the daemon")
	}
	if r := c.events.reasons(); len(r) != 1 || r[0] != "Fenced" {
		t.Fatalf("events %v", r)
	}
	// Still passed: the holders are stopped again at every look, one more
	// appeared meanwhile (a restarted container appending); no new event.
	desk.set(10*time.Second, 11*time.Second)
	gomock.InOrder(
		stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return(nil, nil),
		stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return([]ports.StoppedProcess{{PID: 43, Command: "writer"}}, nil),
	)
	w.Check(ctx)
	w.Check(ctx)
	if r := c.events.reasons(); len(r) != 1 {
		t.Fatalf("events %v, want the one Fenced", r)
	}

	// The daemon is back: the spell ends; the lock stays for the daemon
	// to lift; the next deadline passing fences again.
	desk.set(20*time.Second, 12*time.Second)
	w.Check(ctx) // no StopHolders: the mock fails on one
	if w.Fencing() {
		t.Fatal("still fencing with a deadline ahead")
	}
	if locked(t, c.stores["a"]) == "" {
		t.Fatal("the watchdog lifted the lock itself")
	}
	desk.set(20*time.Second, 20*time.Second)
	stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return(nil, nil)
	w.Check(ctx)
	if !w.Fencing() {
		t.Fatal("not fencing after the second deadline")
	}
	if r := c.events.reasons(); len(r) != 2 {
		t.Fatalf("events %v, want a second Fenced", r)
	}
}

// A volume manager upgraded before its daemon: the node has no permit
// (an older daemon publishes none), or one of a version it does not
// understand (a newer daemon's): the watchdog does not fence, however
// long. Once it has read a permit it is armed: the permit gone, it fences
// (a fence that fails is tried again soon); nothing was writing, so
// nothing is recorded.
func TestAWatchdogFencesNothingUntilItHasReadAPermitAndFencesWhenItGoes(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	info, _ := c.stores["a"].GetVolume(ctx, volID)
	ctrl := gomock.NewController(t)
	stopper := mocks.NewMockHolderStopper(ctrl)
	desk := &permitDesk{err: ports.ErrNotFound}
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: "a", Volume: volID}, desk, desk, func() bool { return false },
		c.stores["a"], &mountsOf{points: []string{info.MountPath}}, c.stores["a"], stopper, c.events, zap.NewNop())
	for range 3 {
		w.Check(ctx) // the stopper mock expects nothing yet
	}
	desk.mu.Lock()
	desk.err = fmt.Errorf("version 2: %w", ports.ErrPermitVersion)
	desk.mu.Unlock()
	w.Check(ctx)
	if w.Fencing() || locked(t, c.stores["a"]) != "" {
		t.Fatal("fenced without a permit it understands")
	}

	desk.set(time.Hour, time.Second)
	w.Check(ctx) // armed
	desk.mu.Lock()
	desk.err = ports.ErrNotFound // removed
	desk.mu.Unlock()
	gomock.InOrder(
		stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath}).Return(nil, errors.New("busy")),
		stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath}).Return(nil, nil),
	)
	if next := w.Check(ctx); next > 100*time.Millisecond {
		t.Fatalf("a failed fence is tried again in %s", next)
	}
	w.Check(ctx)
	if !w.Fencing() {
		t.Fatal("not fencing once its permit went")
	}
	// Nothing was writing, but the copy is locked: recorded all the
	// same, for the daemon to lift the lock.
	if got, _ := desk.Recorded(); got[volID] == "" || locked(t, c.stores["a"]) == "" {
		t.Fatalf("records %v, lock %q", got, locked(t, c.stores["a"]))
	}
	// A newer daemon's permit: the spell ends, it is disarmed.
	desk.mu.Lock()
	desk.err = ports.ErrPermitVersion
	desk.mu.Unlock()
	w.Check(ctx)
	desk.mu.Lock()
	desk.err = ports.ErrNotFound
	desk.mu.Unlock()
	w.Check(ctx) // disarmed: no fence (the mock expects no more)
	if w.Fencing() {
		t.Fatal("fencing next to a newer daemon")
	}
}

// A secondary's watchdog never fences: the replica's volume manager has
// read the state, which names a as the active primary. Before that read
// (a restarted volume manager cut off) it is not known to be secondary.
func TestASecondarysWatchdogDoesNotFence(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.start("b")
	c.start("a")
	c.eventually("b holds a copy", func() bool { return c.newestStored("b") > 0 })
	c.eventually("b has read the state", c.reps["b"].Secondary)
	if c.reps["a"].Secondary() {
		t.Fatal("the primary's volume manager says it is a secondary")
	}
	ctrl := gomock.NewController(t)
	desk := &permitDesk{}
	desk.set(time.Second, time.Hour)
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: "b", Volume: volID}, desk, desk, c.reps["b"].Secondary,
		c.stores["b"], &mountsOf{}, c.stores["b"], mocks.NewMockHolderStopper(ctrl), c.events, zap.NewNop())
	if _, err := c.stores["b"].GetVolume(ctx, volID); err != nil {
		t.Fatal(err)
	}
	w.Check(ctx) // the stopper mock expects nothing
	if w.Fencing() || locked(t, c.stores["b"]) != "" {
		t.Fatal("a secondary's watchdog fenced")
	}
	fresh := replication.New(replication.Config{Node: "b", Volume: volID, Tick: time.Millisecond}, c.stores["b"], c.state, c.net, c.events, zap.NewNop())
	if fresh.Secondary() {
		t.Fatal("a volume manager that has read nothing says it is a secondary")
	}
}

// A secondary's volume manager started while the node's permit has run out
// (its daemon down) knows nothing of its replica before its first read of
// the state: its watchdog fences what mounts the copy, read-only pods
// included, and records it for the daemon (which gives them back whoever
// the primary is: failover's
// TestAWatchdogsRecordIsGivenBackWhoeverThePrimaryIs). Having read the
// state, it does not end the spell: it cannot tell this replica from a
// primary fenced and then taken over, whose writer must stay stopped, and
// no new one start (on zfs-fuse a read-only dataset takes appends), until
// the daemon finishes the fence; the stopped readers wait for the daemon
// either way.
func TestASecondarysWatchdogFencesBeforeItsFirstReadAndRecordsIt(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	c.start("b")
	c.start("a")
	c.eventually("b holds a copy", func() bool { return c.newestStored("b") > 0 })
	c.eventually("b has read the state", c.reps["b"].Secondary)
	info, err := c.stores["b"].GetVolume(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	// b's volume manager as it restarts: nothing read yet, then what its
	// running one has read.
	fresh := replication.New(replication.Config{Node: "b", Volume: volID, Tick: time.Millisecond}, c.stores["b"], c.state, c.net, c.events, zap.NewNop())
	var read atomic.Bool
	secondary := func() bool {
		if read.Load() {
			return c.reps["b"].Secondary()
		}
		return fresh.Secondary()
	}
	pod := "/kubelet/pods/ro/volumes/kubernetes.io~csi/pv/mount"
	ctrl := gomock.NewController(t)
	stopper := mocks.NewMockHolderStopper(ctrl)
	desk := &permitDesk{}
	desk.set(time.Second, time.Hour) // armed, long passed
	mounts := &mountsOf{points: []string{info.MountPath, pod}}
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: "b", Volume: volID, Observed: read.Load}, desk, desk, secondary,
		c.stores["b"], mounts, c.stores["b"], stopper, c.events, zap.NewNop())
	stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return([]ports.StoppedProcess{{PID: 9, Command: "reader"}}, nil).Times(1)
	w.Check(ctx)
	got, _ := desk.Recorded()
	if got[volID] == "" {
		t.Fatal("a secondary's pods fenced before its first read, and no record for the daemon to give them back")
	}
	// Its record and event say what was fenced: a copy whose role was
	// not read yet, not "the primary".
	if !strings.Contains(got[volID], "has not read yet") || strings.HasPrefix(got[volID], "primary on") {
		t.Errorf("the record of a copy fenced before its role was read: %q", got[volID])
	}
	read.Store(true)
	stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath, pod}).Return(nil, nil).Times(1)
	w.Check(ctx)
	if !w.Fencing() {
		t.Fatal("the spell ended on learning the replica is a secondary, before the daemon finished the fence")
	}
	// The daemon back: its permit lets the node write again; the spell ends.
	desk.set(time.Hour, time.Second)
	w.Check(ctx) // a third StopHolders would fail the mock
	if w.Fencing() {
		t.Fatal("still fencing once the permit lets the node write")
	}
}

// failingLock is a write lock whose zfs command fails.
type failingLock struct{}

func (failingLock) LockWrites(context.Context, volume.ID, string) error {
	return errors.New("zfs set readonly=on: timed out")
}
func (failingLock) UnlockWrites(context.Context, volume.ID) error { return nil }

// The holders are stopped, then the lock fails (a zfs command that times
// out), and the daemon comes back before the watchdog tries again: the
// record is there already, so the daemon finishes the fence (kills the
// stopped holders, restarts the pods) rather than leaving them stopped
// with nothing to tell of them.
func TestAWatchdogRecordsItsFenceBeforeStoppingAnything(t *testing.T) {
	c := newCluster(t, 2, "a", "b")
	info, err := c.stores["a"].GetVolume(ctx, volID)
	if err != nil {
		t.Fatal(err)
	}
	ctrl := gomock.NewController(t)
	stopper := mocks.NewMockHolderStopper(ctrl)
	desk := &permitDesk{}
	w := replication.NewWatchdog(replication.WatchdogConfig{Node: "a", Volume: volID}, desk, desk, func() bool { return false },
		c.stores["a"], &mountsOf{points: []string{info.MountPath}}, failingLock{}, stopper, c.events, zap.NewNop())
	desk.set(time.Second, 2*time.Second) // armed, passed
	stopper.EXPECT().StopHolders(gomock.Any(), []string{info.MountPath}).Return([]ports.StoppedProcess{{PID: 42, Command: "app"}}, nil)
	w.Check(ctx)
	if got, _ := desk.Recorded(); got[volID] == "" {
		t.Fatal("holders stopped and no record for the daemon")
	}
}
