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
	state                                          func() ReplicaState
	snapshot, epoch, ready, primary, stale         *prometheus.Desc
	inFlight, bytes, estimated, rate, eta, running *prometheus.Desc
}

// NewReplica registers the replica's metrics in r, labelled with its
// volume and node.
func NewReplica(r prometheus.Registerer, volume, node string, state func() ReplicaState) *Replica {
	l := prometheus.Labels{"volume": volume, "node": node}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, l) }
	x := &Replica{state: state,
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
	}
	r.MustRegister(x)
	return x
}

// Describe implements prometheus.Collector.
func (x *Replica) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{x.snapshot, x.epoch, x.ready, x.primary, x.stale, x.running, x.bytes, x.estimated, x.rate, x.eta} {
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
}

func b(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
