// Package events is ports.EventRecorder on the Kubernetes API: each event
// becomes a core/v1 Event on the volume's ReplicatedVolume and, when the
// volume's claim is known (its spec.claimNamespace/claimName) and the
// recorder may read claims, the same Event on the PersistentVolumeClaim,
// so that `kubectl describe rv <volume>` and `kubectl describe pvc <claim>`
// show what Ferry did and why. Every event is also logged first (the log
// is the record of last resort): when the ReplicatedVolume does not exist
// (yet, or any more), or the API server is slow or away, the log line is
// all there is.
//
// Record never blocks its caller and never fails it: the event goes into
// a bounded queue (full: it is dropped, with a log line), and one worker
// resolves the volume's objects (a GET of the ReplicatedVolume for its
// UID and claim, of the claim for its UID; cached per volume, bounded,
// refreshed after a while) and hands the Event to client-go's broadcaster.
//
// Why client-go's tools/record (core/v1 Events) rather than tools/events
// (events.k8s.io/v1): kubectl describe reads core/v1 Events by
// involvedObject (name, namespace, kind and uid), Ferry's RBAC grants
// events in the core group (the sidecars in the node pod use the same
// API), and the broadcaster already does what a recorder on a hot path
// needs: it aggregates similar events, rate-limits each object's (burst
// 25, then one per 5 minutes), drops rather than blocks when its own queue
// is full, and retries writes while the API server is away. A
// cluster-scoped object's events live in namespace "default" with an
// empty involvedObject.namespace, where kubectl describe looks for them.
package events

import (
	"context"
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/ferry-csi/ferry/adapters/eventlog"
	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Component is the events' source (reportingController).
const Component = "ferry"

// Defaults of Options.
const (
	DefaultQueue    = 256
	DefaultCache    = 1024
	DefaultCacheTTL = 10 * time.Minute
	// requestTimeout bounds each GET of the worker: a hung API server
	// fills the queue (and drops) instead of holding the worker.
	requestTimeout = 10 * time.Second
	// maxMessage is the API's limit on an event's message (note).
	maxMessage = 1024
)

// Options tune a Recorder; zero values take the defaults.
type Options struct {
	// Host is the events' reporting instance: the node.
	Host string
	// Claims: also raise each event on the volume's claim. It needs `get`
	// on persistentvolumeclaims (a refused read raises the event on the
	// ReplicatedVolume alone, and the claim is looked for again later).
	Claims bool
	// Queue is how many events wait for the worker before new ones are
	// dropped.
	Queue int
	// Cache is how many volumes' objects are remembered, and CacheTTL for
	// how long (a ReplicatedVolume created again, a claim found later).
	Cache    int
	CacheTTL time.Duration
}

// Recorder raises Ferry's events as Kubernetes Events.
type Recorder struct {
	kube   kubernetes.Interface
	rvs    dynamic.ResourceInterface
	opts   Options
	log    *zap.Logger
	events ports.EventRecorder // the log of every event
	queue  chan queued
	now    func() time.Time

	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc // ends the worker's requests
	stop    chan struct{}      // closed by Stop
	done    chan struct{}      // closed when the worker returns
	bc      record.EventBroadcaster
	rec     record.EventRecorder
	targets map[volume.ID]target // the worker's alone
}

var _ ports.EventRecorder = (*Recorder)(nil)

type queued struct {
	id volume.ID
	e  ports.Event
}

// target is what a volume's events are raised on.
type target struct {
	rv       *corev1.ObjectReference
	claim    *corev1.ObjectReference // nil: none known
	resolved time.Time
}

// New returns a recorder writing with kube (Events, claims) and dyn
// (ReplicatedVolumes), logging to log. Nothing is sent before Start.
func New(kube kubernetes.Interface, dyn dynamic.Interface, log *zap.Logger, opts Options) *Recorder {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Cache <= 0 {
		opts.Cache = DefaultCache
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	return &Recorder{
		kube: kube, rvs: dyn.Resource(rvapi.GVR), opts: opts, log: log,
		events:  eventlog.Recorder{Log: log},
		queue:   make(chan queued, opts.Queue),
		now:     time.Now,
		targets: map[volume.ID]target{},
	}
}

// Record logs e and queues it for the API server; it never blocks on the
// API server and never fails (ports.EventRecorder). A full queue, or a
// stopped recorder, leaves the log line alone.
func (r *Recorder) Record(ctx context.Context, id volume.ID, e ports.Event) {
	r.events.Record(ctx, id, e)
	r.mu.Lock()
	stopped := r.stopped
	r.mu.Unlock()
	if stopped {
		return
	}
	select {
	case r.queue <- queued{id, e}:
	default:
		r.log.Warn("event dropped: queue full", zap.String("volume", string(id)), zap.String("reason", e.Reason), zap.Int("queue", cap(r.queue)))
	}
}

// Start starts the worker and the broadcaster's writes; they run until
// Stop. ctx only bounds starting (nothing here waits).
func (r *Recorder) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started || r.stopped {
		return nil
	}
	r.started = true
	r.bc = record.NewBroadcaster()
	r.bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.kube.CoreV1().Events("")})
	r.rec = r.bc.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: Component, Host: r.opts.Host})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.stop, r.done = cancel, make(chan struct{}), make(chan struct{})
	go r.work(ctx)
	return nil
}

// Stop stops the worker, raising what is already queued while ctx lasts,
// and then the broadcaster: events it has not written yet are lost (they
// are in the log). Record after Stop only logs.
func (r *Recorder) Stop(ctx context.Context) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return nil
	}
	r.stopped = true
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	close(r.stop)
	select {
	case <-r.done:
	case <-ctx.Done():
		r.cancel() // the worker's requests end at once, and so does it
		<-r.done
	}
	r.cancel()
	r.bc.Shutdown()
	return nil
}

// work raises the queued events one by one until Stop, then those still
// queued.
func (r *Recorder) work(ctx context.Context) {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			for {
				select {
				case q := <-r.queue:
					r.raise(ctx, q.id, q.e)
				default:
					return
				}
			}
		case q := <-r.queue:
			r.raise(ctx, q.id, q.e)
		}
	}
}

// raise emits e on id's objects, if it has a ReplicatedVolume.
func (r *Recorder) raise(ctx context.Context, id volume.ID, e ports.Event) {
	t, ok := r.resolve(ctx, id)
	if !ok {
		return
	}
	msg := truncate(e.Message, maxMessage)
	r.rec.Event(t.rv, e.Type, e.Reason, msg)
	if t.claim != nil {
		r.rec.Event(t.claim, e.Type, e.Reason, msg)
	}
}

// resolve finds id's ReplicatedVolume (and claim) from the cache or the
// API server; false when it has none (the event stays a log line).
func (r *Recorder) resolve(ctx context.Context, id volume.ID) (target, bool) {
	now := r.now()
	if t, ok := r.targets[id]; ok && now.Sub(t.resolved) < r.opts.CacheTTL {
		return t, true
	}
	delete(r.targets, id)
	log := r.log.With(zap.String("volume", string(id)))
	name := rvapi.ObjectName(id)
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	u, err := r.rvs.Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			log.Debug("event not raised: the volume has no ReplicatedVolume")
		} else {
			log.Warn("event not raised: ReplicatedVolume not read", zap.Error(err))
		}
		return target{}, false
	}
	var rv rvapi.ReplicatedVolume
	if b, err := u.MarshalJSON(); err != nil || json.Unmarshal(b, &rv) != nil || rv.Spec.VolumeID != string(id) {
		// Only a hashed name can belong to another volume.
		log.Warn("event not raised: ReplicatedVolume " + name + " is not this volume's")
		return target{}, false
	}
	t := target{
		rv:       &corev1.ObjectReference{Kind: rvapi.Kind, APIVersion: rvapi.APIVersion, Name: rv.Name, UID: rv.UID, ResourceVersion: rv.ResourceVersion},
		resolved: now,
	}
	if r.opts.Claims && rv.Spec.ClaimName != "" {
		pvc, err := r.kube.CoreV1().PersistentVolumeClaims(rv.Spec.ClaimNamespace).Get(rctx, rv.Spec.ClaimName, metav1.GetOptions{})
		switch {
		case err == nil:
			t.claim = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
		case apierrors.IsNotFound(err):
			// Deleted: its volume's events go on the ReplicatedVolume.
		default:
			// Raise on the ReplicatedVolume now; look again next time.
			log.Warn("event raised without its claim: claim not read", zap.String("claim", rv.Spec.ClaimNamespace+"/"+rv.Spec.ClaimName), zap.Error(err))
			return t, true
		}
	}
	r.remember(id, t)
	return t, true
}

// remember caches t, forgetting the oldest entry when the cache is full.
func (r *Recorder) remember(id volume.ID, t target) {
	if len(r.targets) >= r.opts.Cache {
		var oldest volume.ID
		first := true
		for k, v := range r.targets {
			if first || v.resolved.Before(r.targets[oldest].resolved) {
				oldest, first = k, false
			}
		}
		delete(r.targets, oldest)
	}
	r.targets[id] = t
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "..."
	s = s[:n-len(more)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + more
}
