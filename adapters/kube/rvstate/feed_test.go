package rvstate

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// fakeAPI is a fake dynamic client whose watches of ReplicatedVolumes the
// test drives itself: each watch the informer opens is handed over on
// watches, with room for more events than any test sends (the tracker's
// own watches panic when 100 events wait), while lists read the tracker.
type fakeAPI struct {
	client  *dynamicfake.FakeDynamicClient
	watches chan *watch.FakeWatcher
}

func newFakeAPI(objs ...k8sruntime.Object) *fakeAPI {
	f := &fakeAPI{
		client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(k8sruntime.NewScheme(),
			map[schema.GroupVersionResource]string{rvapi.GVR: rvapi.Kind + "List"}, objs...),
		watches: make(chan *watch.FakeWatcher, 16),
	}
	f.client.PrependWatchReactor(rvapi.Resource, func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFakeWithChanSize(100000, false)
		f.watches <- w
		return true, w, nil
	})
	return f
}

// watcher is the informer's next watch.
func (f *fakeAPI) watcher(t *testing.T) *watch.FakeWatcher {
	t.Helper()
	select {
	case w := <-f.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("the feed opened no watch")
		return nil
	}
}

// object is the ReplicatedVolume holding st.
func object(t *testing.T, st replica.State) *unstructured.Unstructured {
	t.Helper()
	u, err := encode(rvapi.FromState(st))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// stateAt is volume id with its primary's copy at snapshot n.
func stateAt(id volume.ID, n replica.SnapshotNumber, version int) replica.State {
	r := replica.Replica{Node: "a", Active: true}
	if n > 0 {
		r.Snapshot, r.SnapshotEpoch = n, 1
	}
	return replica.State{Volume: id, ReplicationFactor: 2, Epoch: 1, Primary: "a",
		Replicas: []replica.Replica{r}, Version: strconv.Itoa(version)}
}

// view is what a reader of the feed holds: each volume's last state.
type view map[volume.ID]replica.State

func (v view) apply(c ports.StateChange) {
	if c.Gone {
		delete(v, c.Volume)
		return
	}
	v[c.Volume] = c.State
}

// readUntil applies the feed's changes to v, each read after pause (a
// slow reader), until done(v) holds; it fails after within.
func readUntil(t *testing.T, feed <-chan ports.StateChange, v view, pause, within time.Duration, done func(view) bool) int {
	t.Helper()
	deadline := time.After(within)
	n := 0
	for !done(v) {
		select {
		case c, ok := <-feed:
			if !ok {
				t.Fatal("the feed closed")
			}
			v.apply(c)
			n++
			time.Sleep(pause)
		case <-deadline:
			t.Fatalf("the reader's view is not current after %v (%d changes read, %d volumes known)", within, n, len(v))
		}
	}
	return n
}

// A reader that does not read while 100 volumes change ten times each
// (far more than any buffer would hold), then reads slowly, still ends
// with every volume's newest state, well before any resync could have
// made up for a dropped one, and reads about one change per volume.
func TestAReaderThatLagsGetsEveryVolumesNewestState(t *testing.T) {
	api := newFakeAPI()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feed, err := New(api.client, nil).Feed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := api.watcher(t)
	const volumes, updates = 100, 10
	id := func(i int) volume.ID { return volume.ID(fmt.Sprintf("pvc-%03d", i)) }
	version := 1
	for i := range volumes {
		w.Add(object(t, stateAt(id(i), 0, version)))
		version++
	}
	for n := replica.SnapshotNumber(1); n <= updates; n++ {
		for i := range volumes {
			w.Modify(object(t, stateAt(id(i), n, version)))
			version++
		}
	}
	v := view{}
	newest := func(v view) bool {
		for i := range volumes {
			st, ok := v[id(i)]
			if !ok || st.Replicas[0].Snapshot != updates {
				return false
			}
		}
		return true
	}
	// The reader comes back once the informer has seen every event
	// (the watch's channel is empty), then reads one change a millisecond.
	for len(w.ResultChan()) > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	read := readUntil(t, feed, v, time.Millisecond, 10*time.Second, newest)
	if len(v) != volumes {
		t.Fatalf("the view holds %d volumes, want %d", len(v), volumes)
	}
	t.Logf("%d changes read for %d changes made", read, volumes*(updates+1))
}

// A deleted ReplicatedVolume reaches the reader as Gone, whether the
// watch says so or a list after a broken watch no longer shows it (a
// tombstone); a volume's changes before its deletion do not outlive it.
func TestADeletionReachesTheReader(t *testing.T) {
	a, b, c := stateAt("pvc-a", 1, 1), stateAt("pvc-b", 1, 2), stateAt("vol/with/slashes", 1, 3)
	api := newFakeAPI(object(t, a), object(t, b), object(t, c))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feed, err := New(api.client, nil).Feed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := api.watcher(t)
	v := view{}
	readUntil(t, feed, v, 0, 10*time.Second, func(v view) bool { return len(v) == 3 })

	// Deleted as the watch tells.
	w.Modify(object(t, stateAt("pvc-a", 2, 4)))
	w.Delete(object(t, stateAt("pvc-a", 2, 5)))
	readUntil(t, feed, v, 0, 10*time.Second, func(v view) bool { _, ok := v["pvc-a"]; return !ok })

	// Deleted while the watch was broken: the informer lists again and
	// finds them gone (one of them under a hashed name).
	gvr := rvapi.GVR
	for _, st := range []replica.State{b, c} {
		if err := api.client.Tracker().Delete(gvr, "", rvapi.ObjectName(st.Volume), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	readUntil(t, feed, v, 0, 10*time.Second, func(v view) bool { return len(v) == 0 })
}

// A tombstone carries the object's key alone for a volume whose object
// name is a hash: the volume is still named in its Gone.
func TestATombstoneOfAHashedNameIsTheVolumesGone(t *testing.T) {
	p := newPending()
	st := stateAt("vol/with/slashes", 1, 1)
	p.seen(object(t, st))
	if _, ok := p.next(); !ok {
		t.Fatal("no change pending after an add")
	}
	p.deleted(cache.DeletedFinalStateUnknown{Key: rvapi.ObjectName(st.Volume)})
	c, ok := p.next()
	if !ok || !c.Gone || c.Volume != st.Volume {
		t.Fatalf("after a tombstone: %+v, %v; want %s gone", c, ok, st.Volume)
	}
	p.deleted(cache.DeletedFinalStateUnknown{Key: rvapi.ObjectName(st.Volume)})
	if c, ok := p.next(); ok {
		t.Fatalf("a second tombstone sent %+v", c)
	}
}

// While nobody reads, a volume's changes replace each other: the feed
// holds one per volume, the newest, in the order the volumes first
// changed.
func TestPendingHoldsEachVolumesNewestChangeOnly(t *testing.T) {
	p := newPending()
	for n := replica.SnapshotNumber(1); n <= 50; n++ {
		for _, id := range []volume.ID{"pvc-b", "pvc-a", "pvc-c"} {
			p.seen(object(t, stateAt(id, n, int(n))))
		}
	}
	p.deleted(object(t, stateAt("pvc-c", 50, 51)))
	if len(p.changes) != 3 || len(p.order) != 3 {
		t.Fatalf("pending holds %d changes in an order of %d, want 3", len(p.changes), len(p.order))
	}
	var got []string
	for c, ok := p.next(); ok; c, ok = p.next() {
		if c.Gone {
			got = append(got, string(c.Volume)+" gone")
			continue
		}
		got = append(got, fmt.Sprintf("%s %d", c.Volume, c.State.Replicas[0].Snapshot))
	}
	if fmt.Sprint(got) != "[pvc-b 50 pvc-a 50 pvc-c gone]" {
		t.Fatalf("sent %v", got)
	}
}

// The channel closes when ctx ends, whether the reader kept up or not,
// and nothing the feed started runs on.
func TestTheFeedClosesWithItsContextAndLeavesNothingRunning(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, reads := range []bool{true, false} {
		api := newFakeAPI(object(t, stateAt("pvc-a", 1, 1)))
		ctx, cancel := context.WithCancel(context.Background())
		feed, err := New(api.client, nil).Feed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := api.watcher(t)
		if reads {
			readUntil(t, feed, view{}, 0, 10*time.Second, func(v view) bool { return len(v) == 1 })
		} else {
			w.Modify(object(t, stateAt("pvc-a", 2, 2))) // pending, unread
			w.Add(object(t, stateAt("pvc-b", 1, 3)))
		}
		cancel()
		deadline := time.After(10 * time.Second)
	drain:
		for {
			select {
			case _, ok := <-feed:
				if !ok {
					break drain
				}
			case <-deadline:
				t.Fatal("the feed did not close after its context ended")
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines running after the feeds closed, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An object the feed cannot read as a state (here of a newer status
// format) is left out, and said so, never passed on as a state.
func TestTheFeedSaysWhichObjectsItLeavesOut(t *testing.T) {
	p := newPending()
	var heard []string
	p.skipped = func(name string, err error) { heard = append(heard, fmt.Sprintf("%s: %v", name, err)) }
	u := object(t, stateAt("pvc-new", 1, 1))
	if err := unstructured.SetNestedField(u.Object, int64(rvapi.MaxStateFormat+1), "status", "format"); err != nil {
		t.Fatal(err)
	}
	p.seen(u)
	if _, ok := p.next(); ok {
		t.Fatal("a state of a newer format was passed on")
	}
	if len(heard) != 1 || !strings.Contains(heard[0], "newer Ferry") {
		t.Fatalf("heard %v", heard)
	}
}
