package filecluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/adapters/filecluster"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/contract"
)

func TestFileClusterHonoursTheClusterStateContract(t *testing.T) {
	contract.RunClusterState(t, func(t *testing.T) ports.ClusterState { return newStore(t, t.TempDir()) })
}

func newStore(t *testing.T, dir string) *filecluster.Store {
	t.Helper()
	s, err := filecluster.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func twoReplicas(t *testing.T, s *filecluster.Store) replica.State {
	t.Helper()
	st, err := s.Create(t.Context(), replica.State{Volume: "vol-a", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{
		{Node: "a", Snapshot: 1, SnapshotEpoch: 1}, {Node: "b", Snapshot: 1, SnapshotEpoch: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestNewCreatesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := newStore(t, dir)
	twoReplicas(t, s)
	if _, err := os.Stat(filepath.Join(dir, "vol-a.json")); err != nil {
		t.Fatal(err)
	}
}

func TestTheFileHoldsTheVersionAndTheState(t *testing.T) {
	dir := t.TempDir()
	created := twoReplicas(t, newStore(t, dir))
	data, err := os.ReadFile(filepath.Join(dir, "vol-a.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Version uint64        `json:"version"`
		State   replica.State `json:"state"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	if strconv.FormatUint(rec.Version, 10) != created.Version || rec.State.Volume != "vol-a" || len(rec.State.Replicas) != 2 {
		t.Fatalf("file holds %s, want version %s and the created state", data, created.Version)
	}
}

// Every field of the state survives the file, a fork a takeover left
// included (a copy on a fenced branch must stay one across a restart).
func TestTheStateRoundTripsThroughTheFile(t *testing.T) {
	dir := t.TempDir()
	want := replica.State{Volume: "vol-f", ReplicationFactor: 2, Epoch: 3, Primary: "b", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 3, SnapshotEpoch: 2, SnapshotGUID: 1<<64 - 1, Fetching: replica.Snap{Number: 4, Epoch: 3, GUID: 1 << 63},
			Forked: replica.Fork{Epoch: 3, At: replica.Snap{Number: 2, Epoch: 2, GUID: 7}}},
		{Node: "b", Snapshot: 2, SnapshotEpoch: 2, SnapshotGUID: 7, Active: true, Ready: true},
	}}
	if _, err := newStore(t, dir).Create(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	got, err := newStore(t, dir).Get(t.Context(), "vol-f")
	if err != nil {
		t.Fatal(err)
	}
	got.Version = ""
	if got.Volume != want.Volume || got.Epoch != want.Epoch || got.Primary != want.Primary || len(got.Replicas) != 2 ||
		got.Replicas[0] != want.Replicas[0] || got.Replicas[1] != want.Replicas[1] {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if !got.Replicas[0].OnFencedBranch() {
		t.Fatal("the copy a takeover left is no longer on its fenced branch")
	}
}

func TestStoresOnTheSameDirectoryShareStates(t *testing.T) {
	dir := t.TempDir()
	one, two := newStore(t, dir), newStore(t, dir)
	twoReplicas(t, one)
	updated, err := two.Update(t.Context(), "vol-a", func(st *replica.State) error { st.Epoch = 4; return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, err := one.Get(t.Context(), "vol-a")
	if err != nil || got.Epoch != 4 || got.Version != updated.Version {
		t.Fatalf("Get through the other store = %+v, %v; want %+v", got, err, updated)
	}
}

func TestADeletedThenCreatedStateNeverReusesAVersion(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	seen := map[string]bool{}
	for round := range 3 {
		st := twoReplicas(t, s)
		if seen[st.Version] {
			t.Fatalf("round %d: Create reused version %s (seen %v)", round, st.Version, seen)
		}
		seen[st.Version] = true
		for range 2 {
			st, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error { st.Epoch++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if seen[st.Version] {
				t.Fatalf("round %d: Update reused version %s (seen %v)", round, st.Version, seen)
			}
			seen[st.Version] = true
		}
		// Marked Deleting, then removed with its last replica.
		if err := s.Delete(t.Context(), "vol-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error { st.Replicas = nil; return nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(t.Context(), "vol-a"); !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("the state outlived its last replica: %v", err)
		}
		s = newStore(t, dir) // the counter lives in the directory, not the Store
	}
}

func TestIDsThatAreNotPlainFileNamesAreRefused(t *testing.T) {
	s := newStore(t, t.TempDir())
	for _, id := range []volume.ID{"../escape", "a/b", ".hidden", "..", ""} {
		_, err := s.Create(t.Context(), replica.State{Volume: id, ReplicationFactor: 1})
		if !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Create(%q) = %v, want ErrInvalid", id, err)
		}
		if _, err := s.Get(t.Context(), id); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Get(%q) = %v, want ErrInvalid", id, err)
		}
		if err := s.Delete(t.Context(), id); !errors.Is(err, ports.ErrInvalid) {
			t.Errorf("Delete(%q) = %v, want ErrInvalid", id, err)
		}
	}
}

// interloping returns an fn for Update that, on its first n runs, lands
// another write (through a second Store on the same directory) after the
// read and before the compare, then applies change. fn holds no lock, so
// the nested Update can run.
func interloping(t *testing.T, other *filecluster.Store, n int, change func(*replica.State) error, runs *int) func(*replica.State) error {
	return func(st *replica.State) error {
		*runs++
		if *runs <= n {
			if _, err := other.Update(context.Background(), "vol-a", func(st *replica.State) error { st.Epoch++; return nil }); err != nil {
				t.Errorf("interloping update: %v", err)
			}
		}
		return change(st)
	}
}

func TestAWriteBetweenReadAndCompareMakesUpdateRunFnAgain(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	twoReplicas(t, s)
	runs := 0
	got, err := s.Update(t.Context(), "vol-a", interloping(t, newStore(t, dir), 1, func(st *replica.State) error {
		st.Replicas[0].Snapshot = 9
		return nil
	}, &runs))
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 {
		t.Fatalf("fn ran %d times, want 2: once on the stale state, once on the fresh one", runs)
	}
	if got.Replicas[0].Snapshot != 9 || got.Epoch != 2 {
		t.Fatalf("final state %+v, want a at 9 and epoch 2: both writes kept", got)
	}
}

func TestUpdateGivesUpWithErrConflictWhenEveryAttemptLoses(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	twoReplicas(t, s)
	runs := 0
	_, err := s.Update(t.Context(), "vol-a", interloping(t, newStore(t, dir), 1000, func(st *replica.State) error {
		st.Replicas[0].Snapshot = 9
		return nil
	}, &runs))
	if !errors.Is(err, ports.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	if runs != 16 {
		t.Fatalf("fn ran %d times, want the bound of 16", runs)
	}
	if got, _ := s.Get(t.Context(), "vol-a"); got.Replicas[0].Snapshot != 1 || got.Epoch != 17 {
		t.Fatalf("state %+v: want only the interloper's 16 writes", got)
	}
}

func TestACancelledContextStopsUpdateBetweenAttempts(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, dir)
	twoReplicas(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	runs := 0
	_, err := s.Update(ctx, "vol-a", interloping(t, newStore(t, dir), 1, func(*replica.State) error { cancel(); return nil }, &runs))
	if !errors.Is(err, context.Canceled) || runs != 1 {
		t.Fatalf("got %v after %d runs, want context.Canceled after 1", err, runs)
	}
}

func TestAnUpdateMayNotRenameTheVolume(t *testing.T) {
	s := newStore(t, t.TempDir())
	twoReplicas(t, s)
	_, err := s.Update(t.Context(), "vol-a", func(st *replica.State) error { st.Volume = "vol-b"; return nil })
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if _, err := s.Get(t.Context(), "vol-b"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("renamed state was written: %v", err)
	}
}

// The multi-process test: the test binary runs itself as helper processes
// (TestHelperProcess), which increment replica a's snapshot alongside the
// parent. The environment tells a helper where the store is, where to meet
// the others before starting, and how many increments to make.
const (
	envDir     = "FERRY_FILECLUSTER_HELPER_DIR"
	envBarrier = "FERRY_FILECLUSTER_HELPER_BARRIER"
	envName    = "FERRY_FILECLUSTER_HELPER_NAME"
	envCount   = "FERRY_FILECLUSTER_HELPER_COUNT"
	// resultPrefix starts the helper's report line on its standard output.
	resultPrefix = "filecluster-helper-result:"
)

// increment adds one to replica a's snapshot until it lands, retrying
// ErrConflict answers as the use cases do; it returns how many times fn ran
// again because another writer got in first (inside Update or after an
// ErrConflict).
func increment(ctx context.Context, s *filecluster.Store) (reruns int, err error) {
	runs := 0
	for try := 0; ; try++ {
		_, err := s.Update(ctx, "vol-a", func(st *replica.State) error {
			runs++
			for i := range st.Replicas {
				if st.Replicas[i].Node == "a" {
					st.Replicas[i].Snapshot++
					st.Replicas[i].SnapshotEpoch = 1
					return nil
				}
			}
			return errors.New("replica a vanished")
		})
		if err == nil {
			return runs - 1, nil
		}
		if !errors.Is(err, ports.ErrConflict) || try == 100 {
			return runs - 1, fmt.Errorf("update: %w (after %d ErrConflict answers)", err, try)
		}
	}
}

// meet announces name as ready in barrier, then waits for the start file.
func meet(barrier, name string) error {
	if err := os.WriteFile(filepath.Join(barrier, "ready-"+name), nil, 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(barrier, "start")); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("no start signal within 30s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHelperProcess is not a test of its own: it is the body of a helper
// process started by TestUpdatesFromSeveralProcessesLoseNothing, and does
// nothing when run otherwise.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(envDir)
	if dir == "" {
		return
	}
	count, err := strconv.Atoi(os.Getenv(envCount))
	if err != nil {
		t.Fatalf("%s: %v", envCount, err)
	}
	s := newStore(t, dir)
	if err := meet(os.Getenv(envBarrier), os.Getenv(envName)); err != nil {
		t.Fatal(err)
	}
	successes, reruns := 0, 0
	for range count {
		c, err := increment(context.Background(), s)
		reruns += c
		if err != nil {
			t.Errorf("after %d successes: %v", successes, err)
			break
		}
		successes++
	}
	fmt.Printf("%s %d %d\n", resultPrefix, successes, reruns)
}

func TestUpdatesFromSeveralProcessesLoseNothing(t *testing.T) {
	const helpers, each = 2, 50
	dir, barrier := t.TempDir(), t.TempDir()
	s := newStore(t, dir)
	if _, err := s.Create(t.Context(), replica.State{Volume: "vol-a", ReplicationFactor: 1, Epoch: 1, Replicas: []replica.Replica{{Node: "a"}}}); err != nil {
		t.Fatal(err)
	}

	type result struct {
		successes, reruns int
		err               error
	}
	results := make([]result, helpers+1)
	var wg sync.WaitGroup
	for i := range helpers {
		name := "helper-" + strconv.Itoa(i)
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), envDir+"="+dir, envBarrier+"="+barrier, envName+"="+name, envCount+"="+strconv.Itoa(each))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			r := &results[i]
			var out strings.Builder
			sc := bufio.NewScanner(stdout)
			found := false
			for sc.Scan() {
				line := sc.Text()
				out.WriteString(line + "\n")
				if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
					_, err := fmt.Sscan(rest, &r.successes, &r.reruns)
					found = err == nil
				}
			}
			if err := cmd.Wait(); err != nil || !found {
				r.err = fmt.Errorf("%s: %v (found result: %v)\nstdout:\n%s\nstderr:\n%s", name, err, found, out.String(), stderr.String())
			}
		})
	}

	// Start together, so that the processes really contend.
	deadline := time.Now().Add(30 * time.Second)
	for ready := 0; ready < helpers; {
		ready = 0
		for i := range helpers {
			if _, err := os.Stat(filepath.Join(barrier, "ready-helper-"+strconv.Itoa(i))); err == nil {
				ready++
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d helpers ready after 30s", ready, helpers)
		}
		time.Sleep(time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(barrier, "start"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	parent := &results[helpers]
	for range each {
		c, err := increment(t.Context(), s)
		parent.reruns += c
		if err != nil {
			parent.err = fmt.Errorf("parent after %d successes: %w", parent.successes, err)
			break
		}
		parent.successes++
	}
	wg.Wait()

	successes, reruns := 0, 0
	for _, r := range results {
		if r.err != nil {
			t.Error(r.err)
		}
		successes += r.successes
		reruns += r.reruns
	}
	got, err := s.Get(t.Context(), "vol-a")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := got.Replica("a")
	if successes != (helpers+1)*each || a.Snapshot != replica.SnapshotNumber(successes) {
		t.Fatalf("snapshot = %d after %d successful updates, want %d", a.Snapshot, successes, (helpers+1)*each)
	}
	t.Logf("%d processes made %d updates; fn ran again %d times after losing a compare-and-swap", helpers+1, successes, reruns)
}
