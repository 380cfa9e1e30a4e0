package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ReplicaState is what a volume manager says of its replica when scraped.
type ReplicaState struct {
	Snapshot  uint64 // the number of the newest snapshot it holds
	Epoch     uint64
	Ready     bool // up to date enough to take over (replica.IsReady)
	Primary   bool // the volume's active primary
	StaleView bool // its last read of the shared state failed
	// Transfer is the transfer in progress; nil for none.
	Transfer *Transfer
	// NewestTaken is when the newest snapshot this copy holds was taken
	// (zero: it holds none); Behind how many snapshots it is behind the
	// volume's newest, HoldsNewest whether it holds that one.
	NewestTaken time.Time
	Behind      uint64
	HoldsNewest bool
	// ReplicationFactor and ReadyCopies are the volume's, as this volume
	// manager's last view of the shared state says.
	ReplicationFactor, ReadyCopies int
	Totals                         Totals
}

// Totals count a volume manager's work since it started.
type Totals struct {
	SnapshotsTaken, Transfers, TransferFailures uint64
	TransferredBytes                            int64
	TransferSeconds                             float64
}

// Transfer is a snapshot stream in progress.
type Transfer struct {
	Bytes          int64 // moved so far
	EstimatedBytes int64 // the sender's estimate of the whole; 0 unknown
	BytesPerSecond float64
	ETA            time.Duration // 0 unknown
}

// Replica reports one volume manager's replica, read when scraped.
type Replica struct {
	state                                func() ReplicaState
	now                                  func() time.Time
	snapshot, epoch, ready, primary      *prometheus.Desc
	stale, bytes, estimated, rate, eta   *prometheus.Desc
	running, behind, lag, newest, age    *prometheus.Desc
	factor, readyCopies, taken           *prometheus.Desc
	transfers, failures, moved, duration *prometheus.Desc
}

// NewReplica registers the replica's metrics in r, labelled with its
// volume and node.
func NewReplica(r prometheus.Registerer, volume, node string, state func() ReplicaState) *Replica {
	l := prometheus.Labels{"volume": volume, "node": node}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, l) }
	x := &Replica{state: state, now: time.Now,
		snapshot: d("ferry_replica_snapshot", "The number of the newest snapshot this copy holds (the primary: the newest it took)."),
		epoch:    d("ferry_replica_epoch", "The term (epoch) of the newest snapshot this copy holds."),
		ready:    d("ferry_replica_ready", "1 when this copy is recent enough to take over (within the allowed lag), else 0."),
		primary:  d("ferry_replica_primary", "1 when this copy is the volume's active primary (mounted read-write here), else 0."),
		stale:    d("ferry_replica_stale_view", "1 when this volume manager's last read of the shared state failed (it acts on its last view), else 0."),
		running:  d("ferry_transfer_running", "1 while a snapshot stream to this copy (or from it, for a restore) is under way, else 0."),
		bytes:    d("ferry_transfer_bytes", "The bytes the transfer under way has moved so far."),
		estimated: d("ferry_transfer_estimated_bytes",
			"The sender's estimate of the whole transfer under way (0 when unknown)."),
		rate: d("ferry_transfer_rate_bytes_per_second", "The transfer under way's average rate since it started."),
		eta:  d("ferry_transfer_eta_seconds", "The transfer under way's estimated time to its end (0 when unknown)."),
		behind: d("ferry_replica_snapshots_behind",
			"How many snapshots this copy is behind the volume's newest (0 when it holds it)."),
		lag: d("ferry_replica_lag_seconds",
			"0 when this copy holds the volume's newest snapshot; otherwise the age of the newest it holds: writes since then are not on this copy. Absent while it holds none."),
		newest: d("ferry_replica_newest_snapshot_timestamp_seconds",
			"When the newest snapshot this copy holds was taken, in seconds since the epoch (absent while it holds none)."),
		age: d("ferry_replica_newest_snapshot_age_seconds",
			"The age of the newest snapshot this copy holds (absent while it holds none)."),
		factor:      d("ferry_volume_replication_factor", "The copies the volume asks for, as this volume manager last read it."),
		readyCopies: d("ferry_volume_ready_copies", "The volume's copies recent enough to take over, as this volume manager last read them."),
		taken:       d("ferry_snapshots_taken_total", "Replication snapshots this volume manager took (as the primary)."),
		transfers:   d("ferry_transfers_total", "Snapshot streams this copy received that ended (completed or failed)."),
		failures:    d("ferry_transfer_failures_total", "Snapshot streams this copy received that failed."),
		moved:       d("ferry_transferred_bytes_total", "The bytes of the snapshot streams this copy received that ended."),
		duration:    d("ferry_transfer_seconds_total", "The time the snapshot streams this copy received that ended took."),
	}
	r.MustRegister(x)
	return x
}

// Describe implements prometheus.Collector.
func (x *Replica) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{x.snapshot, x.epoch, x.ready, x.primary, x.stale, x.running, x.bytes, x.estimated, x.rate, x.eta,
		x.behind, x.lag, x.newest, x.age, x.factor, x.readyCopies, x.taken, x.transfers, x.failures, x.moved, x.duration} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (x *Replica) Collect(ch chan<- prometheus.Metric) {
	s := x.state()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	g(x.snapshot, float64(s.Snapshot))
	g(x.epoch, float64(s.Epoch))
	g(x.ready, b(s.Ready))
	g(x.primary, b(s.Primary))
	g(x.stale, b(s.StaleView))
	t := s.Transfer
	g(x.running, b(t != nil))
	if t == nil {
		t = &Transfer{}
	}
	g(x.bytes, float64(t.Bytes))
	g(x.estimated, float64(t.EstimatedBytes))
	g(x.rate, t.BytesPerSecond)
	g(x.eta, t.ETA.Seconds())
	g(x.behind, float64(s.Behind))
	if !s.NewestTaken.IsZero() {
		age := max(0, x.now().Sub(s.NewestTaken).Seconds())
		lag := age
		if s.HoldsNewest {
			lag = 0
		}
		g(x.lag, lag)
		g(x.newest, float64(s.NewestTaken.UnixNano())/1e9)
		g(x.age, age)
	}
	g(x.factor, float64(s.ReplicationFactor))
	g(x.readyCopies, float64(s.ReadyCopies))
	c := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	c(x.taken, float64(s.Totals.SnapshotsTaken))
	c(x.transfers, float64(s.Totals.Transfers))
	c(x.failures, float64(s.Totals.TransferFailures))
	c(x.moved, float64(s.Totals.TransferredBytes))
	c(x.duration, s.Totals.TransferSeconds)
}

func b(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
