package rvstate

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ferry-csi/ferry/adapters/kube/rvapi"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Feed sends the state of every ReplicatedVolume as it changes, and Gone
// when one is deleted (ports.StateFeed): an informer on all of them. The
// daemon keeps its view from it (its fence reads the view when the API
// server cannot be read; its placement labels move as soon as a volume
// becomes usable here or not).
//
// Nothing is dropped: the informer's events go into pending, which holds
// the newest change of each volume not yet sent, and one goroutine hands
// them to the reader as fast as it reads. A reader that lags gets every
// volume's newest change once it reads again, never a stale one, and the
// feed holds one change per volume at most. A deletion the informer learns
// only when it lists again (a tombstone) is sent as Gone too. There is no
// resync: an informer's resync sends its own cache again, not the
// server's objects, and nothing lost needs making up for. The channel
// closes when ctx ends, once the informer and the sender have stopped.
func (s *Store) Feed(ctx context.Context) (<-chan ports.StateChange, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(s.client, 0)
	inf := f.ForResource(rvapi.GVR).Informer()
	p := newPending()
	p.skipped = s.skipped
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.seen,
		UpdateFunc: func(_, obj any) { p.seen(obj) },
		DeleteFunc: p.deleted,
	}); err != nil {
		return nil, fmt.Errorf("feed of the volumes' states: %w", err)
	}
	out := make(chan ports.StateChange)
	f.Start(ctx.Done())
	go func() {
		defer close(out)
		defer f.Shutdown() // waits for the informer and its handlers
		p.send(ctx, out)
	}()
	return out, nil
}

// pending holds the newest change of each volume not yet sent, in the
// order the volumes changed first since they were last sent: the latest
// change of a volume replaces an unsent one, so a slow reader loses none
// and the memory held is bounded by the number of volumes.
type pending struct {
	mu      sync.Mutex
	changes map[volume.ID]ports.StateChange
	order   []volume.ID // the keys of changes, oldest first
	// names maps the object name of each volume whose state was put, and
	// not deleted since, to the volume: what a deletion (whose object may
	// be a tombstone holding only the name) is translated with.
	names map[string]volume.ID
	// goneFirst are the volumes whose unsent Gone a newer state replaced
	// (deleted, then created again under the same name): the Gone is
	// still sent first, so the reader forgets the old volume's term.
	goneFirst map[volume.ID]bool
	wake      chan struct{} // one pending signal: changes is not empty
	skipped   func(name string, err error)
}

func newPending() *pending {
	return &pending{changes: map[volume.ID]ports.StateChange{}, names: map[string]volume.ID{}, goneFirst: map[volume.ID]bool{}, wake: make(chan struct{}, 1)}
}

// seen is the informer's add and update: the object's state replaces the
// volume's unsent change. A state that cannot be decoded, or an object
// not named after the volume it claims (ObjectName; Get refuses it too),
// is skipped, and told to the store's OnSkipped.
func (p *pending) seen(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	rv, err := decode(u)
	if err == nil {
		var st replica.State
		if st, err = rvapi.ToState(rv); err == nil && rvapi.ObjectName(st.Volume) != rv.Name {
			err = fmt.Errorf("it names volume %q, whose object is %q: %w", st.Volume, rvapi.ObjectName(st.Volume), ports.ErrInvalid)
		}
		if err == nil {
			p.mu.Lock()
			p.names[rv.Name] = st.Volume
			p.put(ports.StateChange{Volume: st.Volume, State: st})
			p.mu.Unlock()
			return
		}
	}
	if p.skipped != nil {
		p.skipped(u.GetName(), err)
	}
}

// deleted is the informer's delete, of the object or of a tombstone (a
// deletion found by listing again, the last object known maybe stale):
// Gone replaces the volume's unsent change. An object whose state was
// never put was never sent either, and needs no Gone.
func (p *pending) deleted(obj any) {
	var name string
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		name = o.GetName()
	case cache.DeletedFinalStateUnknown:
		_, n, err := cache.SplitMetaNamespaceKey(o.Key)
		if err != nil {
			return
		}
		name = n
	default:
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.names[name]
	if !ok {
		return
	}
	delete(p.names, name)
	p.put(ports.StateChange{Volume: id, Gone: true})
}

// put records c as its volume's newest unsent change; p.mu is held.
func (p *pending) put(c ports.StateChange) {
	old, ok := p.changes[c.Volume]
	if !ok {
		p.order = append(p.order, c.Volume)
	} else if old.Gone && !c.Gone {
		p.goneFirst[c.Volume] = true
	}
	p.changes[c.Volume] = c
	select {
	case p.wake <- struct{}{}:
	default: // a signal is pending already
	}
}

// next takes the oldest unsent change.
func (p *pending) next() (ports.StateChange, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.order) == 0 {
		return ports.StateChange{}, false
	}
	id := p.order[0]
	if p.goneFirst[id] {
		// The deletion first; the state of the volume created again
		// stays first in line.
		delete(p.goneFirst, id)
		return ports.StateChange{Volume: id, Gone: true}, true
	}
	p.order = p.order[1:]
	if len(p.order) == 0 {
		p.order = nil // let the array go
	}
	c := p.changes[id]
	delete(p.changes, id)
	return c, true
}

// send hands the changes to out as the reader takes them, until ctx ends.
func (p *pending) send(ctx context.Context, out chan<- ports.StateChange) {
	for {
		c, ok := p.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case out <- c:
		}
	}
}
