package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-csi/ferry/ports"
)

// Kept reports the copies a node's store kept aside (fenced writes a
// takeover gave up, waiting for an operator): how many and their bytes,
// read as the pool is (at most once per poolMaxAge). The same reading
// serves GET /kept, the list `kubectl ferry fenced` shows.
type Kept struct {
	count, bytes, up *prometheus.Desc
	*cached[[]ports.KeptCopy]
}

// NewKept registers the kept copies' metrics in r.
func NewKept(r prometheus.Registerer, node string, list func(context.Context) ([]ports.KeptCopy, error)) *Kept {
	l := prometheus.Labels{"node": node}
	k := &Kept{cached: &cached[[]ports.KeptCopy]{read: list, maxAge: poolMaxAge},
		count: prometheus.NewDesc("ferry_kept_copies", "Copies kept aside on this node (fenced writes a takeover gave up) that no operator has dropped.", nil, l),
		bytes: prometheus.NewDesc("ferry_kept_copies_bytes", "What the copies kept aside on this node reference.", nil, l),
		up:    prometheus.NewDesc("ferry_kept_copies_up", "1 when the copies kept aside could be listed, 0 when not.", nil, l),
	}
	r.MustRegister(k)
	return k
}

// Describe implements prometheus.Collector.
func (k *Kept) Describe(ch chan<- *prometheus.Desc) { ch <- k.count; ch <- k.bytes; ch <- k.up }

// Collect implements prometheus.Collector.
func (k *Kept) Collect(ch chan<- prometheus.Metric) {
	list, err := k.current()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(k.up, prometheus.GaugeValue, 0)
		return
	}
	var bytes int64
	for _, c := range list {
		bytes += c.SizeBytes
	}
	ch <- prometheus.MustNewConstMetric(k.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(k.count, prometheus.GaugeValue, float64(len(list)))
	ch <- prometheus.MustNewConstMetric(k.bytes, prometheus.GaugeValue, float64(bytes))
}

// KeptCopyJSON is one copy kept aside as GET /kept lists it.
type KeptCopyJSON struct {
	Name    string    `json:"name"`
	Volume  string    `json:"volume"`
	Bytes   int64     `json:"bytes"`
	Taken   time.Time `json:"taken,omitzero"`
	Inspect string    `json:"inspect"`
	Drop    string    `json:"drop"`
	// Root is where the node keeps every copy: a copy's dataset is
	// directly below it.
	Root string `json:"root"`
}

// ServeHTTP lists the copies kept aside as JSON (read-only: dropping one
// is an operator's act on the node, `kubectl ferry fenced drop`).
func (k *Kept) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	list, err := k.current()
	if err != nil {
		http.Error(w, "the copies kept aside could not be listed: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	out := make([]KeptCopyJSON, 0, len(list))
	for _, c := range list {
		out = append(out, KeptCopyJSON{Name: c.Name, Volume: string(c.Volume), Bytes: c.SizeBytes, Taken: c.Taken, Inspect: c.Inspect, Drop: c.Drop, Root: c.Root})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
