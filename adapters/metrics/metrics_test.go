package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

func TestCSICallsAreCountedByMethodAndCode(t *testing.T) {
	r := NewRegistry()
	c := NewCSI(r)
	c.Observe("/csi.v1.Node/NodePublishVolume", codes.OK, 20*time.Millisecond)
	c.Observe("/csi.v1.Node/NodePublishVolume", codes.FailedPrecondition, time.Millisecond)
	c.Observe("/csi.v1.Node/NodePublishVolume", codes.OK, 30*time.Millisecond)
	want := `
# HELP ferry_csi_calls_total CSI calls served, by method and gRPC code.
# TYPE ferry_csi_calls_total counter
ferry_csi_calls_total{code="FailedPrecondition",method="NodePublishVolume"} 1
ferry_csi_calls_total{code="OK",method="NodePublishVolume"} 2
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "ferry_csi_calls_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c.duration); n != 1 {
		t.Errorf("%d duration series, want one per method", n)
	}
}

// Whatever runs, the command label takes a bounded set of values.
func TestZFSCommandsAreCountedWithABoundedLabel(t *testing.T) {
	r := NewRegistry()
	z := NewZFS(r)
	z.Observe("zfs", "list", time.Millisecond, nil)
	z.Observe("zfs", "recv", time.Second, errors.New("exit status 1"))
	z.Observe("zfs", "tank/ferry/pvc-1@ferry-1-2", time.Millisecond, nil) // not a subcommand
	z.Observe("zpool", "sync", time.Millisecond, nil)
	want := `
# HELP ferry_zfs_commands_total zfs and zpool commands run, by command ("zfs get", ...) and result (ok or error).
# TYPE ferry_zfs_commands_total counter
ferry_zfs_commands_total{command="zfs list",result="ok"} 1
ferry_zfs_commands_total{command="zfs other",result="ok"} 1
ferry_zfs_commands_total{command="zfs recv",result="error"} 1
ferry_zfs_commands_total{command="zpool sync",result="ok"} 1
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "ferry_zfs_commands_total"); err != nil {
		t.Error(err)
	}
}

func TestThePoolIsReadWhenScrapedAndSaysWhenItCannotBe(t *testing.T) {
	r := NewRegistry()
	var fail bool
	p := NewPool(r, "node1", "tank", func(context.Context) (ports.PoolCapacity, error) {
		if fail {
			return ports.PoolCapacity{}, errors.New("no pool")
		}
		return ports.PoolCapacity{TotalBytes: 1000, AvailableBytes: 250}, nil
	})
	want := `
# HELP ferry_pool_available_bytes What the pool has free for Ferry's volumes.
# TYPE ferry_pool_available_bytes gauge
ferry_pool_available_bytes{node="node1",pool="tank"} 250
# HELP ferry_pool_size_bytes The size of the pool Ferry's volumes are in (what they use and what is free).
# TYPE ferry_pool_size_bytes gauge
ferry_pool_size_bytes{node="node1",pool="tank"} 1000
# HELP ferry_pool_up 1 when the pool answered the scrape's read, 0 when it did not.
# TYPE ferry_pool_up gauge
ferry_pool_up{node="node1",pool="tank"} 1
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "ferry_pool_size_bytes", "ferry_pool_available_bytes", "ferry_pool_up"); err != nil {
		t.Error(err)
	}
	fail = true
	p.maxAge = 0 // every scrape reads
	want = `
# HELP ferry_pool_up 1 when the pool answered the scrape's read, 0 when it did not.
# TYPE ferry_pool_up gauge
ferry_pool_up{node="node1",pool="tank"} 0
`
	if err := testutil.GatherAndCompare(r, strings.NewReader(want), "ferry_pool_size_bytes", "ferry_pool_available_bytes", "ferry_pool_up"); err != nil {
		t.Error(err)
	}
}

func TestAReplicaIsReportedAsItsVolumeManagerSeesItWhenScraped(t *testing.T) {
	r := NewRegistry()
	st := ReplicaState{Snapshot: 42, Epoch: 3, Ready: true}
	NewReplica(r, "pvc-1", "node2", func() ReplicaState { return st })
	names := []string{"ferry_replica_snapshot", "ferry_replica_ready", "ferry_replica_primary", "ferry_transfer_running", "ferry_transfer_bytes", "ferry_transfer_eta_seconds"}
	want := func(snap, ready, primary, running, bytes, eta string) string {
		return `
# HELP ferry_replica_primary 1 when this copy is the volume's active primary (mounted read-write here), else 0.
# TYPE ferry_replica_primary gauge
ferry_replica_primary{node="node2",volume="pvc-1"} ` + primary + `
# HELP ferry_replica_ready 1 when this copy is recent enough to take over (within the allowed lag), else 0.
# TYPE ferry_replica_ready gauge
ferry_replica_ready{node="node2",volume="pvc-1"} ` + ready + `
# HELP ferry_replica_snapshot The number of the newest snapshot this copy holds (the primary: the newest it took).
# TYPE ferry_replica_snapshot gauge
ferry_replica_snapshot{node="node2",volume="pvc-1"} ` + snap + `
# HELP ferry_transfer_bytes The bytes the transfer under way has moved so far.
# TYPE ferry_transfer_bytes gauge
ferry_transfer_bytes{node="node2",volume="pvc-1"} ` + bytes + `
# HELP ferry_transfer_eta_seconds The transfer under way's estimated time to its end (0 when unknown).
# TYPE ferry_transfer_eta_seconds gauge
ferry_transfer_eta_seconds{node="node2",volume="pvc-1"} ` + eta + `
# HELP ferry_transfer_running 1 while a snapshot stream to this copy (or from it, for a restore) is under way, else 0.
# TYPE ferry_transfer_running gauge
ferry_transfer_running{node="node2",volume="pvc-1"} ` + running + `
`
	}
	if err := testutil.GatherAndCompare(r, strings.NewReader(want("42", "1", "0", "0", "0", "0")), names...); err != nil {
		t.Error(err)
	}
	st = ReplicaState{Snapshot: 43, Epoch: 3, Primary: true, Transfer: &Transfer{Bytes: 1 << 20, EstimatedBytes: 4 << 20, BytesPerSecond: 1 << 19, ETA: 6 * time.Second}}
	if err := testutil.GatherAndCompare(r, strings.NewReader(want("43", "0", "1", "1", "1.048576e+06", "6")), names...); err != nil {
		t.Error(err)
	}
}

func TestTheEndpointServesTheMetrics(t *testing.T) {
	r := NewRegistry()
	NewCSI(r).Observe("/csi.v1.Identity/Probe", codes.OK, time.Millisecond)
	srv := httptest.NewServer(Handler(r))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`ferry_csi_calls_total{code="OK",method="Probe"} 1`, "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

// Scrapes within the reading's age, and those during a read, do not read
// the pool again: a scraper cannot pile zfs commands up.
func TestThePoolIsReadOncePerIntervalWhateverTheScrapes(t *testing.T) {
	r := NewRegistry()
	var reads atomic.Int32
	release, started := make(chan struct{}), make(chan struct{}, 1)
	p := NewPool(r, "node1", "tank", func(context.Context) (ports.PoolCapacity, error) {
		if reads.Add(1) > 1 {
			started <- struct{}{}
			<-release // a slow read
		}
		return ports.PoolCapacity{TotalBytes: 1000, AvailableBytes: 250}, nil
	})
	for range 5 {
		if _, err := r.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads for 5 scrapes within %s, want 1", n, poolMaxAge)
	}
	p.maxAge = 0
	done := make(chan struct{})
	go func() { defer close(done); _, _ = r.Gather() }() // reads, slowly
	<-started
	for range 5 { // meanwhile: the last reading, no other read
		if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_pool_up 1 when the pool answered the scrape's read, 0 when it did not.
# TYPE ferry_pool_up gauge
ferry_pool_up{node="node1",pool="tank"} 1
`), "ferry_pool_up"); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	<-done
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads, want 2: scrapes during a read read again", n)
	}
}

func TestAReplicasLagIsZeroOnlyWhileItHoldsTheNewestSnapshot(t *testing.T) {
	r := NewRegistry()
	now := time.Unix(1_000_000, 0)
	st := ReplicaState{Snapshot: 40, Epoch: 3}
	x := NewReplica(r, "pvc-1", "node2", func() ReplicaState { return st })
	x.now = func() time.Time { return now }
	names := []string{"ferry_replica_lag_seconds", "ferry_replica_newest_snapshot_age_seconds", "ferry_replica_snapshots_behind"}
	// Holding nothing yet: no lag or age to report, only how far behind.
	st.Behind = 40
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_replica_snapshots_behind How many snapshots this copy is behind the volume's newest (0 when it holds it).
# TYPE ferry_replica_snapshots_behind gauge
ferry_replica_snapshots_behind{node="node2",volume="pvc-1"} 40
`), names...); err != nil {
		t.Error(err)
	}
	// Two behind, its newest taken 25 s ago: writes of the last 25 s are
	// elsewhere.
	st.NewestTaken, st.Behind = now.Add(-25*time.Second), 2
	lag := func(lag, age, behind string) string {
		return `
# HELP ferry_replica_lag_seconds 0 when this copy holds the volume's newest snapshot; otherwise the age of the newest it holds: writes since then are not on this copy. Absent while it holds none.
# TYPE ferry_replica_lag_seconds gauge
ferry_replica_lag_seconds{node="node2",volume="pvc-1"} ` + lag + `
# HELP ferry_replica_newest_snapshot_age_seconds The age of the newest snapshot this copy holds (absent while it holds none).
# TYPE ferry_replica_newest_snapshot_age_seconds gauge
ferry_replica_newest_snapshot_age_seconds{node="node2",volume="pvc-1"} ` + age + `
# HELP ferry_replica_snapshots_behind How many snapshots this copy is behind the volume's newest (0 when it holds it).
# TYPE ferry_replica_snapshots_behind gauge
ferry_replica_snapshots_behind{node="node2",volume="pvc-1"} ` + behind + `
`
	}
	if err := testutil.GatherAndCompare(r, strings.NewReader(lag("25", "25", "2")), names...); err != nil {
		t.Error(err)
	}
	// Caught up: an idle volume (no new snapshot for a while) lags nothing.
	st.Behind, st.HoldsNewest = 0, true
	if err := testutil.GatherAndCompare(r, strings.NewReader(lag("0", "25", "0")), names...); err != nil {
		t.Error(err)
	}
}

func TestAVolumeManagersTotalsAreCounters(t *testing.T) {
	r := NewRegistry()
	st := ReplicaState{ReplicationFactor: 3, ReadyCopies: 2, Totals: Totals{SnapshotsTaken: 7, Transfers: 5, TransferFailures: 1, TransferredBytes: 1 << 20, TransferSeconds: 2.5}}
	NewReplica(r, "pvc-1", "node2", func() ReplicaState { return st })
	got, err := testutil.GatherAndCount(r, "ferry_snapshots_taken_total", "ferry_transfers_total", "ferry_transfer_failures_total",
		"ferry_transferred_bytes_total", "ferry_transfer_seconds_total", "ferry_volume_replication_factor", "ferry_volume_ready_copies")
	if err != nil || got != 7 {
		t.Fatalf("%d series (%v), want 7", got, err)
	}
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_transfer_failures_total Snapshot streams this copy received that failed.
# TYPE ferry_transfer_failures_total counter
ferry_transfer_failures_total{node="node2",volume="pvc-1"} 1
# HELP ferry_volume_ready_copies The volume's copies recent enough to take over, as this volume manager last read them.
# TYPE ferry_volume_ready_copies gauge
ferry_volume_ready_copies{node="node2",volume="pvc-1"} 2
`), "ferry_transfer_failures_total", "ferry_volume_ready_copies"); err != nil {
		t.Error(err)
	}
}

type recorded []ports.Event

func (r *recorded) Record(_ context.Context, _ volume.ID, e ports.Event) { *r = append(*r, e) }

func TestEventsAreCountedByReasonAndPrimaryChangesByCause(t *testing.T) {
	r := NewRegistry()
	var next recorded
	e := NewEvents(r, &next)
	for _, ev := range []ports.Event{
		{Type: ports.EventNormal, Reason: "BecamePrimary"},
		{Type: ports.EventWarning, Reason: "TookOver"},
		{Type: ports.EventWarning, Reason: "Fenced"},
		{Type: ports.EventWarning, Reason: "Fenced"},
	} {
		e.Record(context.Background(), "pvc-1", ev)
	}
	if len(next) != 4 {
		t.Errorf("%d events reached the recorder, want 4", len(next))
	}
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_events_total Events this process raised on volumes, by type (Normal, Warning) and reason (RolledBack, Fenced, FencedWritesKept, TookOver, ...).
# TYPE ferry_events_total counter
ferry_events_total{reason="BecamePrimary",type="Normal"} 1
ferry_events_total{reason="Fenced",type="Warning"} 2
ferry_events_total{reason="FencedWritesKept",type="Warning"} 0
ferry_events_total{reason="FencedWritesNotKept",type="Warning"} 0
ferry_events_total{reason="Replaced",type="Warning"} 0
ferry_events_total{reason="RolledBack",type="Warning"} 0
ferry_events_total{reason="TookOver",type="Warning"} 1
# HELP ferry_primary_changes_total Replicas this process made a volume's active primary, by cause: promotion (a publish on the replica's node, planned) or takeover (from a node judged lost).
# TYPE ferry_primary_changes_total counter
ferry_primary_changes_total{cause="promotion"} 1
ferry_primary_changes_total{cause="takeover"} 1
`), "ferry_events_total", "ferry_primary_changes_total"); err != nil {
		t.Error(err)
	}
}

func TestBuildInfoNamesTheVersionAndMode(t *testing.T) {
	r := NewRegistry()
	NewBuildInfo(r, "v0.3.0", "daemon")
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_build_info 1, labelled with the version and the mode of this Ferry process.
# TYPE ferry_build_info gauge
ferry_build_info{mode="daemon",version="v0.3.0"} 1
`), "ferry_build_info"); err != nil {
		t.Error(err)
	}
}

func TestKeptCopiesAreCountedAndListed(t *testing.T) {
	r := NewRegistry()
	taken := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	list := []ports.KeptCopy{
		{Name: "tank/ferry-fenced/pvc-1-k1@k1", Volume: "pvc-1", SizeBytes: 1000, Taken: taken, Inspect: "zfs set mountpoint=<dir> x", Drop: "zfs destroy -r x"},
		{Name: "tank/ferry-fenced/pvc-2-k2@k2", Volume: "pvc-2", SizeBytes: 24},
	}
	var fail error
	k := NewKept(r, "n1", func(context.Context) ([]ports.KeptCopy, error) { return list, fail })
	k.maxAge = 0
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_kept_copies Copies kept aside on this node (fenced writes a takeover gave up) that no operator has dropped.
# TYPE ferry_kept_copies gauge
ferry_kept_copies{node="n1"} 2
# HELP ferry_kept_copies_bytes What the copies kept aside on this node reference.
# TYPE ferry_kept_copies_bytes gauge
ferry_kept_copies_bytes{node="n1"} 1024
`), "ferry_kept_copies", "ferry_kept_copies_bytes"); err != nil {
		t.Error(err)
	}
	srv := httptest.NewServer(k)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var got []KeptCopyJSON
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 2 || got[0].Volume != "pvc-1" || got[0].Bytes != 1000 || !got[0].Taken.Equal(taken) || got[0].Drop != "zfs destroy -r x" || got[1].Name != list[1].Name {
		t.Errorf("GET /kept = %+v", got)
	}
	fail = errors.New("zfs: pool suspended")
	if n, err := testutil.GatherAndCount(r, "ferry_kept_copies"); err != nil || n != 0 {
		t.Errorf("unreadable: %d series of ferry_kept_copies (%v), want none", n, err)
	}
	if resp, err := srv.Client().Get(srv.URL); err != nil || resp.StatusCode != 503 {
		t.Errorf("GET /kept unreadable: %v %v, want 503", resp, err)
	}
}

type fakeLease struct{ err error }

func (f fakeLease) Renew(context.Context) error { return f.err }

type fakeAsker struct {
	ok  bool
	err error
}

func (f fakeAsker) Promise(context.Context, replica.Node, replica.Node) (bool, time.Duration, error) {
	return f.ok, time.Second, f.err
}

func TestLeaseRenewalsAndPromisesAreCounted(t *testing.T) {
	r := NewRegistry()
	l := NewLiveness(r)
	_ = l.Lease(fakeLease{}).Renew(context.Background())
	_ = l.Lease(fakeLease{errors.New("apiserver away")}).Renew(context.Background())
	_ = l.Lease(fakeLease{}).Renew(context.Background())
	for _, a := range []fakeAsker{{ok: true}, {}, {err: errors.New("unreachable")}, {ok: true}} {
		_, _, _ = l.Asker(a).Promise(context.Background(), "n2", "n1")
	}
	answer := l.Answers(func(replica.Node) (bool, time.Duration) { return true, time.Second })
	answer("n3")
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_lease_renewals_total Renewals of this node's lease, by result (ok, error): a node that cannot renew fences its primaries.
# TYPE ferry_lease_renewals_total counter
ferry_lease_renewals_total{result="error"} 1
ferry_lease_renewals_total{result="ok"} 2
# HELP ferry_promises_answered_total Promises other nodes asked of this one, by whether it gave them (true, false).
# TYPE ferry_promises_answered_total counter
ferry_promises_answered_total{given="true"} 1
# HELP ferry_promises_asked_total Promises this node asked of the nodes that may take its volumes over, when its lease could not be renewed, by result (given, refused, error).
# TYPE ferry_promises_asked_total counter
ferry_promises_asked_total{result="error"} 1
ferry_promises_asked_total{result="given"} 2
ferry_promises_asked_total{result="refused"} 1
`), "ferry_lease_renewals_total", "ferry_promises_asked_total", "ferry_promises_answered_total"); err != nil {
		t.Error(err)
	}
	if n, _ := testutil.GatherAndCount(r, "ferry_lease_renewal_duration_seconds"); n != 1 {
		t.Errorf("%d renewal duration histograms, want 1", n)
	}
}

func TestVolumeInfoLabelsAVolumeWithItsClaim(t *testing.T) {
	r := NewRegistry()
	var err error
	NewVolumeInfo(r, "pvc-1", "n1", func(context.Context) (ports.VolumeSpec, error) {
		return ports.VolumeSpec{PersistentVolume: "pvc-1", StorageClass: "ferry", ClaimNamespace: "shop", ClaimName: "data"}, err
	})
	if err := testutil.GatherAndCompare(r, strings.NewReader(`
# HELP ferry_volume_info 1, labelled with the volume's PersistentVolume, StorageClass and claim (join on volume and node).
# TYPE ferry_volume_info gauge
ferry_volume_info{claim="data",claim_namespace="shop",node="n1",persistentvolume="pvc-1",storageclass="ferry",volume="pvc-1"} 1
`), "ferry_volume_info"); err != nil {
		t.Error(err)
	}
	r2 := NewRegistry()
	err = errors.New("apiserver away")
	NewVolumeInfo(r2, "pvc-1", "n1", func(context.Context) (ports.VolumeSpec, error) { return ports.VolumeSpec{}, err })
	if n, _ := testutil.GatherAndCount(r2, "ferry_volume_info"); n != 0 {
		t.Errorf("spec unread: %d series, want none", n)
	}
}
