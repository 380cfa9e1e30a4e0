package metrics

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Events counts the events a process raises, by type and reason, and
// hands each to the recorder it wraps: every event Ferry raises (a
// rollback, a fence, a copy kept aside, a takeover) is a counter an alert
// can watch. Reasons are the code's own few words, so the labels stay
// bounded.
type Events struct {
	next    ports.EventRecorder
	events  *prometheus.CounterVec
	primary *prometheus.CounterVec
}

var _ ports.EventRecorder = (*Events)(nil)

// primaryChanges maps the events that make a replica the active primary
// to their cause.
var primaryChanges = map[string]string{
	// A volume manager promoted on the node a claim is published on: the
	// first publish, or a planned move after the old primary stepped down.
	"BecamePrimary": "promotion",
	// A survivor's daemon took the volume over from a node judged lost.
	"TookOver": "takeover",
}

// watched are the events the alerts and the dashboard count.
var watched = []ports.Event{
	{Type: ports.EventWarning, Reason: "Fenced"}, {Type: ports.EventWarning, Reason: "FencedWritesKept"},
	{Type: ports.EventWarning, Reason: "FencedWritesNotKept"}, {Type: ports.EventWarning, Reason: "TookOver"},
	{Type: ports.EventWarning, Reason: "RolledBack"}, {Type: ports.EventWarning, Reason: "Replaced"},
	{Type: ports.EventNormal, Reason: "BecamePrimary"},
}

// NewEvents registers the event counters in r and returns a recorder that
// counts, then records with next.
func NewEvents(r prometheus.Registerer, next ports.EventRecorder) *Events {
	e := &Events{next: next,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_events_total",
			Help: "Events this process raised on volumes, by type (Normal, Warning) and reason (RolledBack, Fenced, FencedWritesKept, TookOver, ...).",
		}, []string{"type", "reason"}),
		primary: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_primary_changes_total",
			Help: "Replicas this process made a volume's active primary, by cause: promotion (a publish on the replica's node, planned) or takeover (from a node judged lost).",
		}, []string{"cause"}),
	}
	// Present at 0 from the start, so that increase() sees the first one
	// (a series born at 1 increases by nothing): the causes, and the
	// events the alerts watch.
	for _, cause := range primaryChanges {
		e.primary.WithLabelValues(cause)
	}
	for _, ev := range watched {
		e.events.WithLabelValues(ev.Type, ev.Reason)
	}
	r.MustRegister(e.events, e.primary)
	return e
}

// Record counts ev and records it.
func (e *Events) Record(ctx context.Context, id volume.ID, ev ports.Event) {
	e.events.WithLabelValues(ev.Type, ev.Reason).Inc()
	if cause, ok := primaryChanges[ev.Reason]; ok {
		e.primary.WithLabelValues(cause).Inc()
	}
	e.next.Record(ctx, id, ev)
}
