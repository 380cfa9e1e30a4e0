package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/ports"
)

// Liveness counts what keeps a node's primaries writing: its lease's
// renewals (and how long each took), the promises it asked of the copies
// that may take its volumes over, and those it answered for other nodes.
type Liveness struct {
	renewals      *prometheus.CounterVec
	renewDuration prometheus.Histogram
	asked         *prometheus.CounterVec
	answered      *prometheus.CounterVec
}

// NewLiveness registers the liveness metrics in r.
func NewLiveness(r prometheus.Registerer) *Liveness {
	l := &Liveness{
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_lease_renewals_total",
			Help: "Renewals of this node's lease, by result (ok, error): a node that cannot renew fences its primaries."}, []string{"result"}),
		renewDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ferry_lease_renewal_duration_seconds",
			Help:    "How long this node's lease renewals took (a renewal slower than the renewal period counts as failed).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}}),
		asked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_promises_asked_total",
			Help: "Promises this node asked of the nodes that may take its volumes over, when its lease could not be renewed, by result (given, refused, error)."}, []string{"result"}),
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_promises_answered_total",
			Help: "Promises other nodes asked of this one, by whether it gave them (true, false)."}, []string{"given"}),
	}
	for _, v := range []string{"ok", "error"} {
		l.renewals.WithLabelValues(v)
	}
	r.MustRegister(l.renewals, l.renewDuration, l.asked, l.answered)
	return l
}

// Lease counts next's renewals.
func (l *Liveness) Lease(next ports.NodeLease) ports.NodeLease { return lease{next, l} }

type lease struct {
	next ports.NodeLease
	l    *Liveness
}

func (x lease) Renew(ctx context.Context) error {
	start := time.Now()
	err := x.next.Renew(ctx)
	x.l.renewDuration.Observe(time.Since(start).Seconds())
	x.l.renewals.WithLabelValues(result(err)).Inc()
	return err
}

// Asker counts the promises asked through next.
func (l *Liveness) Asker(next ports.PromiseAsker) ports.PromiseAsker { return asker{next, l} }

type asker struct {
	next ports.PromiseAsker
	l    *Liveness
}

func (x asker) Promise(ctx context.Context, node, from replica.Node) (bool, time.Duration, error) {
	ok, d, err := x.next.Promise(ctx, node, from)
	res := "refused"
	switch {
	case err != nil:
		res = "error"
	case ok:
		res = "given"
	}
	x.l.asked.WithLabelValues(res).Inc()
	return ok, d, err
}

// Answers counts the promises answered by fn.
func (l *Liveness) Answers(fn func(replica.Node) (bool, time.Duration)) func(replica.Node) (bool, time.Duration) {
	return func(n replica.Node) (bool, time.Duration) {
		ok, d := fn(n)
		given := "false"
		if ok {
			given = "true"
		}
		l.answered.WithLabelValues(given).Inc()
		return ok, d
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}
