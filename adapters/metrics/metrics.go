// Package metrics exposes what Ferry's processes do as Prometheus metrics
// (prometheus/client_golang), on an HTTP endpoint of their own
// (--metrics-listen): the node daemon's CSI calls, ZFS commands and pool,
// and each volume manager's replica (its snapshot, readiness, role and the
// transfer in progress). It decides nothing: the other adapters report
// through plain functions (csi.WithCallObserver, zfs.Config.Observe), and
// a volume manager's state is read when scraped.
//
// Names follow Prometheus's conventions (ferry_<what>_<unit>, counters
// _total); labels stay bounded: a volume, a node, a pool, a CSI method, a
// zfs subcommand, a gRPC code, never a snapshot's name.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"

	"github.com/ferry-csi/ferry/ports"
)

// NewRegistry returns a registry with the Go runtime's and the process's
// own metrics.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// NewBuildInfo registers ferry_build_info: 1, labelled with the
// process's version and mode (daemon, controller, volume-manager), so that
// a query or `kubectl ferry doctor` finds the processes of other releases.
func NewBuildInfo(r prometheus.Registerer, version, mode string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_build_info",
		Help:        "1, labelled with the version and the mode of this Ferry process.",
		ConstLabels: prometheus.Labels{"version": version, "mode": mode}})
	g.Set(1)
	r.MustRegister(g)
}

// Handler serves the registry's metrics in the exposition format, on
// GET /metrics; a process may add its own read-only routes.
func Handler(r *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r}))
	return mux
}

// CSI counts the CSI calls a process serves.
type CSI struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewCSI registers the CSI call metrics in r.
func NewCSI(r prometheus.Registerer) *CSI {
	c := &CSI{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_csi_calls_total",
			Help: "CSI calls served, by method and gRPC code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_csi_call_duration_seconds",
			Help:    "How long CSI calls took, by method.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"method"}),
	}
	r.MustRegister(c.calls, c.duration)
	return c
}

// Observe records one call: its full gRPC method (/csi.v1.Node/NodePublishVolume),
// its code and how long it took (csi.WithCallObserver).
func (c *CSI) Observe(fullMethod string, code codes.Code, took time.Duration) {
	m := method(fullMethod)
	c.calls.WithLabelValues(m, code.String()).Inc()
	c.duration.WithLabelValues(m).Observe(took.Seconds())
}

// method is the last part of a full gRPC method name: the CSI services'
// methods are a fixed set, so the label stays bounded.
func method(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}

// ZFS counts the zfs and zpool commands a process runs.
type ZFS struct {
	commands *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewZFS registers the ZFS command metrics in r.
func NewZFS(r prometheus.Registerer) *ZFS {
	z := &ZFS{
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_zfs_commands_total",
			Help: "zfs and zpool commands run, by command (\"zfs get\", ...) and result (ok or error).",
		}, []string{"command", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_zfs_command_duration_seconds",
			Help:    "How long zfs and zpool commands took, by command (streams: until their end).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120, 600},
		}, []string{"command"}),
	}
	r.MustRegister(z.commands, z.duration)
	return z
}

// zfsCommands are the commands counted by name; any other counts as
// "other", so that the label stays bounded whatever runs.
var zfsCommands = map[string]bool{
	"zfs list": true, "zfs get": true, "zfs set": true, "zfs inherit": true, "zfs create": true, "zfs destroy": true,
	"zfs snapshot": true, "zfs rollback": true, "zfs send": true, "zfs recv": true, "zfs receive": true, "zfs mount": true,
	"zfs unmount": true, "zfs rename": true, "zfs clone": true, "zfs promote": true, "zfs load-key": true,
	"zfs unload-key": true, "zfs change-key": true, "zfs hold": true, "zfs release": true, "zfs version": true,
	"zpool list": true, "zpool get": true, "zpool sync": true, "zpool status": true, "zpool version": true,
}

// Observe records one command (zfs.Config.Observe): the tool and its
// subcommand, how long it ran, and whether it failed.
func (z *ZFS) Observe(tool, subcommand string, took time.Duration, err error) {
	cmd := tool + " " + subcommand
	if !zfsCommands[cmd] {
		cmd = tool + " other"
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	z.commands.WithLabelValues(cmd, result).Inc()
	z.duration.WithLabelValues(cmd).Observe(took.Seconds())
}

// Pool reports a node's pool: its size and what is free, read when
// scraped (one `zfs get`, bounded in time), at most once per poolMaxAge:
// scrapes meanwhile, and those that come while a read is under way, get
// the last reading (zfs commands share a few slots with the CSI calls).
type Pool struct {
	node, pool string
	size, free *prometheus.Desc
	up         *prometheus.Desc
	*cached[ports.PoolCapacity]
}

// poolMaxAge is how long a pool reading serves scrapes.
const poolMaxAge = 10 * time.Second

// NewPool registers the pool's metrics in r.
func NewPool(r prometheus.Registerer, node, pool string, capacity func(context.Context) (ports.PoolCapacity, error)) *Pool {
	labels := prometheus.Labels{"node": node, "pool": pool}
	p := &Pool{node: node, pool: pool, cached: &cached[ports.PoolCapacity]{read: capacity, maxAge: poolMaxAge},
		size: prometheus.NewDesc("ferry_pool_size_bytes", "The size of the pool Ferry's volumes are in (what they use and what is free).", nil, labels),
		free: prometheus.NewDesc("ferry_pool_available_bytes", "What the pool has free for Ferry's volumes.", nil, labels),
		up:   prometheus.NewDesc("ferry_pool_up", "1 when the pool answered the scrape's read, 0 when it did not.", nil, labels),
	}
	r.MustRegister(p)
	return p
}

// Describe implements prometheus.Collector.
func (p *Pool) Describe(ch chan<- *prometheus.Desc) { ch <- p.size; ch <- p.free; ch <- p.up }

// cached is a reading of the store that serves scrapes for maxAge: read
// again only when older, and by one scrape at a time (the others get the
// last reading; the very first waits for it).
type cached[T any] struct {
	read    func(context.Context) (T, error)
	maxAge  time.Duration
	reading sync.Mutex // held by the read under way
	mu      sync.Mutex // guards what follows
	last    T
	lastErr error
	at      time.Time // when last was read; zero: never
}

// current returns the last reading, reading again first when it is older
// than maxAge and no other read is under way.
func (p *cached[T]) current() (T, error) {
	p.mu.Lock()
	never := p.at.IsZero()
	fresh := !never && time.Since(p.at) < p.maxAge
	c, err := p.last, p.lastErr
	p.mu.Unlock()
	if fresh {
		return c, err
	}
	if !p.reading.TryLock() {
		if never {
			// The first read is under way: wait for it.
			p.reading.Lock()
			p.reading.Unlock()
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.last, p.lastErr
	}
	defer p.reading.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err = p.read(ctx)
	p.mu.Lock()
	p.last, p.lastErr, p.at = c, err, time.Now()
	p.mu.Unlock()
	return c, err
}

// Collect implements prometheus.Collector.
func (p *Pool) Collect(ch chan<- prometheus.Metric) {
	c, err := p.current()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(p.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(p.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(p.size, prometheus.GaugeValue, float64(c.TotalBytes))
	ch <- prometheus.MustNewConstMetric(p.free, prometheus.GaugeValue, float64(c.AvailableBytes))
}
