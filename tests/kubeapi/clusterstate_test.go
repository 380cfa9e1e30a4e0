//go:build apiserver

package kubeapi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/adapters/kube/rvstate"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
	"github.com/ferry-csi/ferry/tests/kubeapi"
)

var server *kubeapi.Server

// TestMain starts one API server for the package, unless this process is
// a helper another test started (it then reaches its parent's server).
func TestMain(m *testing.M) {
	if os.Getenv("FERRY_HELPER_HOST") != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "kubeapi-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err = kubeapi.New(dir)
	if err == nil {
		err = server.InstallCRD("../../deploy/crds/crd-replicatedvolume.yaml", rvapi.GVR)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeapi:", err)
		if server != nil {
			server.Stop()
		}
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, server.Logs())
	}
	server.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func start(t *testing.T) *rest.Config {
	t.Helper()
	return server.Config
}

// The contract every ClusterState honours, on ReplicatedVolume objects of
// a real API server: each case starts with no object.
func TestReplicatedVolumesHonourTheClusterStateContract(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	contract.RunClusterState(t, func(t *testing.T) ports.ClusterState {
		deleteAll(t, dyn)
		return rvstate.New(dyn, nil)
	})
}

// asNode is cfg acting as Ferry's node daemon (its ServiceAccount): the
// one identity the admission policies let delete a ReplicatedVolume.
func asNode(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ferry-system:ferry-node"}
	return c
}

// deleteAll deletes every ReplicatedVolume, releasing Ferry's finalizer
// as the last replica would; dyn must act as the node daemon.
func deleteAll(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	rvs := dyn.Resource(rvapi.GVR)
	for {
		l, err := rvs.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 0 {
			return
		}
		for _, u := range l.Items {
			if err := rvs.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if _, err := rvs.Patch(ctx, u.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// What the API server adds to the contract: the object is readable by
// operators (status summary, printer columns' fields) and a state edited
// by hand into something the domain never writes is refused on read.
func TestTheStatusCarriesTheSummaryAndAHandEditedStateIsRefused(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	ctx := context.Background()
	st := replica.State{Volume: "pvc-6f1c", ReplicationFactor: 2, Epoch: 2, Primary: "node-a", Replicas: []replica.Replica{
		{Node: "node-a", Snapshot: 9, SnapshotEpoch: 2, SnapshotGUID: 1 << 63, Active: true, Ready: true},
		{Node: "node-b", Snapshot: 7, SnapshotEpoch: 2, Fetching: replica.Snap{Number: 9, Epoch: 2, GUID: 1<<64 - 1}},
		// The primary epoch 2's takeover replaced: a field the schema
		// left out would be pruned, and the copy count as ready again.
		{Node: "node-c", Snapshot: 8, SnapshotEpoch: 1, Forked: replica.Fork{Epoch: 2, At: replica.Snap{Number: 7, Epoch: 1, GUID: 1<<64 - 3}}},
	}}
	created, err := s.Create(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, st.Volume); err != nil || got.Replicas[0].SnapshotGUID != 1<<63 || got.Replicas[1].Fetching.GUID != 1<<64-1 {
		t.Fatalf("GUIDs beyond int64 did not survive: %+v, %v", got, err)
	} else if got.Replicas[2].Forked != st.Replicas[2].Forked {
		t.Fatalf("the fork a takeover left did not survive: %+v", got.Replicas[2])
	}
	u, err := dyn.Resource(rvapi.GVR).Get(ctx, "pvc-6f1c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := u.Object["status"].(map[string]any)
	want := map[string]any{"phase": "Degraded", "readyReplicas": int64(1), "newest": "ferry-2-9", "maxLag": int64(2), "primary": "node-a"}
	for k, v := range want {
		if status[k] != v {
			t.Errorf("status.%s = %#v, want %#v", k, status[k], v)
		}
	}
	// A hand edit the schema lets through but the domain forbids: two
	// active replicas.
	reps := status["replicas"].([]any)
	reps[1].(map[string]any)["active"] = true
	u.SetResourceVersion(created.Version)
	if _, err := dyn.Resource(rvapi.GVR).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, st.Volume); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Get of a hand-edited state: %v, want ErrInvalid", err)
	}
	ran := false
	if _, err := s.Update(ctx, st.Volume, func(*replica.State) error { ran = true; return nil }); !errors.Is(err, ports.ErrInvalid) || ran {
		t.Fatalf("Update of a hand-edited state: %v (fn ran: %v), want ErrInvalid without deciding", err, ran)
	}
	// The schema refuses what it can see: a negative snapshot number.
	reps[1].(map[string]any)["snapshot"] = int64(-1)
	if _, err := dyn.Resource(rvapi.GVR).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err == nil {
		t.Fatal("the API server accepted a negative snapshot number")
	}
}

// A volume whose ID is not a valid object name gets a hashed name and
// is still found by its ID.
func TestAVolumeIDThatIsNoObjectNameIsStoredUnderItsHash(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	ctx := context.Background()
	id := "Vol_Upper.case"
	if _, err := s.Create(ctx, replica.State{Volume: "Vol_Upper.case", ReplicationFactor: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(rvapi.GVR).Get(ctx, rvapi.ObjectName("Vol_Upper.case"), metav1.GetOptions{}); err != nil || !strings.HasPrefix(rvapi.ObjectName("Vol_Upper.case"), "rv-") {
		t.Fatalf("object %s: %v", rvapi.ObjectName("Vol_Upper.case"), err)
	}
	if got, err := s.Get(ctx, "Vol_Upper.case"); err != nil || string(got.Volume) != id {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// Two processes (this test binary run twice more as helpers) and this one
// increment one counter through Update at once: the compare-and-swap is
// the API server's, so no increment is lost across processes.
func TestThreeProcessesIncrementingOneCounterLoseNothing(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	ctx := context.Background()
	if _, err := s.Create(ctx, replica.State{Volume: "pvc-counter", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "a"}}}); err != nil {
		t.Fatal(err)
	}
	const each = 60
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var helpers []*exec.Cmd
	var outs []*strings.Builder
	for i := range 2 {
		cmd := exec.Command(self, "-test.run=^TestHelperIncrement$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FERRY_HELPER_HOST="+cfg.Host, "FERRY_HELPER_TOKEN="+cfg.BearerToken, "FERRY_HELPER_N="+strconv.Itoa(each), fmt.Sprintf("FERRY_HELPER_ID=%d", i))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		helpers, outs = append(helpers, cmd), append(outs, out)
	}
	if err := increment(ctx, s, each); err != nil {
		t.Error(err)
	}
	for i, h := range helpers {
		if err := h.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
	got, err := s.Get(ctx, "pvc-counter")
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := got.Replica("a"); r.Snapshot != 3*each {
		t.Fatalf("counter %d after 3 processes × %d increments, want %d", r.Snapshot, each, 3*each)
	}
}

// TestHelperIncrement is the helper process's body; it does nothing
// unless started by the test above.
func TestHelperIncrement(t *testing.T) {
	host := os.Getenv("FERRY_HELPER_HOST")
	if host == "" {
		return
	}
	n, _ := strconv.Atoi(os.Getenv("FERRY_HELPER_N"))
	cfg := &rest.Config{Host: host, BearerToken: os.Getenv("FERRY_HELPER_TOKEN"), TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1, Timeout: 30 * time.Second}
	if err := increment(context.Background(), rvstate.New(dynamic.NewForConfigOrDie(cfg), nil), n); err != nil {
		t.Fatal(err)
	}
}

func increment(ctx context.Context, s ports.ClusterState, n int) error {
	for range n {
		for try := 0; ; try++ {
			_, err := s.Update(ctx, "pvc-counter", func(st *replica.State) error {
				st.Replicas[0].Snapshot++
				st.Replicas[0].SnapshotEpoch = 1
				return nil
			})
			if err == nil {
				break
			}
			if !errors.Is(err, ports.ErrConflict) || try == 100 {
				return fmt.Errorf("increment: %w (after %d conflicts)", err, try)
			}
		}
	}
	return nil
}

// Watch on a real API server: another writer's update and a deletion are
// notified; the channel closes with its context.
func TestReplicatedVolumesHonourTheStateWatcherContract(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	contract.RunStateWatcher(t, func(t *testing.T) contract.WatchableState {
		deleteAll(t, dyn)
		return rvstate.New(dyn, nil)
	})
}

// The daemon's feed sends each ReplicatedVolume's state as it changes,
// the volume being deleted marked as such, and Gone once it is removed.
func TestTheFeedSendsEveryVolumesStateAsItChanges(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	fctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feed, err := s.Feed(fctx)
	if err != nil {
		t.Fatal(err)
	}
	// The feed coalesces a volume's changes (a reader gets its newest
	// state, not every step), so each change is awaited before the next.
	await := func(what string, seen func(ports.StateChange) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case c := <-feed:
				if c.Volume == "pvc-feed" && seen(c) {
					return
				}
			case <-deadline:
				t.Fatalf("the feed did not send the change: %s", what)
			}
		}
	}
	ctx := context.Background()
	if _, err := s.Create(ctx, replica.State{Volume: "pvc-feed", ReplicationFactor: 2, Epoch: 1, Primary: "a",
		Replicas: []replica.Replica{{Node: "a", Active: true}}}); err != nil {
		t.Fatal(err)
	}
	await("created", func(c ports.StateChange) bool {
		r, ok := c.State.Replica("a")
		return !c.Gone && ok && r.Active
	})
	if _, err := s.Update(ctx, "pvc-feed", func(st *replica.State) error {
		st.Replicas[0].Active = false
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	await("inactive", func(c ports.StateChange) bool {
		r, ok := c.State.Replica("a")
		return !c.Gone && ok && !r.Active
	})
	if err := s.Delete(ctx, "pvc-feed"); err != nil {
		t.Fatal(err)
	}
	await("deleting", func(c ports.StateChange) bool { return !c.Gone && c.State.Deleting })
	// The last replica leaves: the finalizer goes, and the object.
	if _, err := s.Update(ctx, "pvc-feed", func(st *replica.State) error {
		st.Replicas = nil
		return nil
	}); err != nil && !errors.Is(err, ports.ErrNotFound) {
		t.Fatal(err)
	}
	await("gone", func(c ports.StateChange) bool { return c.Gone })
	cancel()
	for range feed {
		// drained: the feed closes with its context
	}
}

// A reader that lags behind many more changes than any buffer holds
// still gets every volume's newest state, and every deletion, well within
// a lease period once it reads again (the feed drops nothing; before
// issue 21 it dropped states and made up for them every 30 s).
func TestTheFeedLosesNoVolumesNewestStateWhileItsReaderLags(t *testing.T) {
	cfg := start(t)
	dyn := dynamic.NewForConfigOrDie(asNode(cfg))
	deleteAll(t, dyn)
	s := rvstate.New(dyn, nil)
	fctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feed, err := s.Feed(fctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const volumes, updates = 40, 8 // 400 changes, the reader away
	id := func(i int) volume.ID { return volume.ID(fmt.Sprintf("pvc-lag-%02d", i)) }
	for i := range volumes {
		if _, err := s.Create(ctx, replica.State{Volume: id(i), ReplicationFactor: 2, Epoch: 1, Primary: "a",
			Replicas: []replica.Replica{{Node: "a", Active: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range updates {
		for i := range volumes {
			if _, err := s.Update(ctx, id(i), func(st *replica.State) error {
				st.Replicas[0].Snapshot++
				st.Replicas[0].SnapshotEpoch = 1
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := map[volume.ID]bool{}
	for i := 0; i < volumes; i += 4 {
		if err := s.Delete(ctx, id(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, id(i), func(st *replica.State) error {
			st.Replicas = nil
			return nil
		}); err != nil && !errors.Is(err, ports.ErrNotFound) {
			t.Fatal(err)
		}
		gone[id(i)] = true
	}
	view := map[volume.ID]replica.State{}
	current := func() bool {
		for i := range volumes {
			st, ok := view[id(i)]
			if gone[id(i)] == ok {
				return false
			}
			if r, _ := st.Replica("a"); ok && r.Snapshot != updates {
				return false
			}
		}
		return true
	}
	deadline := time.After(5 * time.Second)
	for !current() {
		select {
		case c := <-feed:
			if c.Gone {
				delete(view, c.Volume)
			} else {
				view[c.Volume] = c.State
			}
		case <-deadline:
			t.Fatalf("the reader's view is not current 5 s after it read again: %d volumes of %d, %d deleted", len(view), volumes, len(gone))
		}
	}
	cancel()
	for range feed {
	}
}
