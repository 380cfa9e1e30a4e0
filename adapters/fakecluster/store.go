package fakecluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/ferry-csi/ferry/adapters/casloop"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is an in-memory ClusterState, safe for concurrent use.
type Store struct {
	mu sync.Mutex
	// states holds private copies: nothing handed out shares their Replicas.
	states map[volume.ID]replica.State
	// version counts writes across the whole store, like a resourceVersion:
	// a state deleted and created again never reuses an old version.
	version     uint64
	beforeWrite func()
	// watchers are the channels Watch handed out, per volume.
	watchers map[volume.ID]map[chan struct{}]bool
}

var (
	_ ports.ClusterState = (*Store)(nil)
	_ ports.StateWatcher = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{states: map[volume.ID]replica.State{}, watchers: map[volume.ID]map[chan struct{}]bool{}}
}

// Watch notifies after every write or deletion of id's state committed
// from now on (ports.StateWatcher), coalesced.
func (s *Store) Watch(ctx context.Context, id volume.ID) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers[id] == nil {
		s.watchers[id] = map[chan struct{}]bool{}
	}
	s.watchers[id][ch] = true
	s.mu.Unlock()
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		delete(s.watchers[id], ch)
		s.mu.Unlock()
		close(ch)
	}()
	return ch, nil
}

// notify tells id's watchers; the caller holds s.mu.
func (s *Store) notify(id volume.ID) {
	for ch := range s.watchers[id] {
		select {
		case ch <- struct{}{}:
		default: // one pending notification is enough
		}
	}
}

// BeforeWrite installs a hook that Update calls after fn ran and before it
// compares versions, without holding the store's lock: a test may write
// there (even through Update; the hook is called again for that write) to
// land a concurrent writer exactly in the window a CAS must detect. nil
// removes the hook.
func (s *Store) BeforeWrite(hook func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeWrite = hook
}

func (s *Store) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if err := ctx.Err(); err != nil {
		return replica.State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[id]
	if !ok {
		return replica.State{}, fmt.Errorf("cluster state of volume %s: %w", id, ports.ErrNotFound)
	}
	return casloop.Clone(st), nil
}

func (s *Store) Create(ctx context.Context, st replica.State) (replica.State, error) {
	if err := ctx.Err(); err != nil {
		return replica.State{}, err
	}
	if err := check(&st); err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.states[st.Volume]; ok {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, ports.ErrExists)
	}
	return s.store(st), nil
}

// Update is an optimistic compare-and-swap loop; see ports.ClusterState.
// Validation happens after the compare, so that a result made invalid only
// by a stale read is retried on fresh data instead of refused.
func (s *Store) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	return casloop.Update(ctx, id, s.Get, func(expected string, next replica.State) (replica.State, bool, error) {
		s.mu.Lock()
		hook := s.beforeWrite
		s.mu.Unlock()
		if hook != nil {
			hook()
		}
		return s.compareAndSwap(expected, next)
	}, fn)
}

// compareAndSwap writes next if the stored state is still at version read;
// ok is false when someone wrote (or deleted) in between.
func (s *Store) compareAndSwap(read string, next replica.State) (written replica.State, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, found := s.states[next.Volume]
	if !found || cur.Version != read {
		return replica.State{}, false, nil
	}
	if err := check(&next); err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	}
	if casloop.Removes(next) {
		delete(s.states, next.Volume)
		s.notify(next.Volume)
		next.Version = ""
		return next, true, nil
	}
	return s.store(next), true, nil
}

func (s *Store) Delete(ctx context.Context, id volume.ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.states[id]
	if !ok {
		return fmt.Errorf("delete cluster state of volume %s: %w", id, ports.ErrNotFound)
	}
	if len(cur.Replicas) > 0 {
		if !cur.Deleting {
			cur.Deleting = true
			s.store(cur)
		}
		return nil
	}
	delete(s.states, id)
	s.notify(id)
	return nil
}

// store saves a copy of st under a new version, whatever version st carried,
// and returns another copy. The caller holds s.mu.
func (s *Store) store(st replica.State) replica.State {
	s.version++
	st = casloop.Clone(st)
	st.Version = strconv.FormatUint(s.version, 10)
	s.states[st.Volume] = st
	s.notify(st.Volume)
	return casloop.Clone(st)
}

// check refuses what no stored state may be, as ErrInvalid.
func check(st *replica.State) error {
	if st.Volume == "" {
		return fmt.Errorf("state names no volume: %w", ports.ErrInvalid)
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return nil
}

// clone copies st deeply: Replica holds only values, so copying the slice
// is enough for callers and the store never to share memory.

// RecordCapacity grows the state's CapacityBytes (ports.CapacityRecorder).
func (s *Store) RecordCapacity(ctx context.Context, id volume.ID, capacityBytes int64) error {
	_, err := s.Update(ctx, id, func(st *replica.State) error {
		if st.CapacityBytes >= capacityBytes {
			return replica.ErrUnchanged
		}
		st.CapacityBytes = capacityBytes
		return nil
	})
	if errors.Is(err, replica.ErrUnchanged) {
		return nil
	}
	return err
}

// CreateWithSpec is Create recording what the spec tells the replicas:
// the volume's size, snapshot interval and properties (ports.SpecRecorder).
func (s *Store) CreateWithSpec(ctx context.Context, st replica.State, spec ports.VolumeSpec) (replica.State, error) {
	st.CapacityBytes, st.SnapshotInterval, st.Properties = spec.CapacityBytes, spec.SnapshotInterval, spec.Properties
	return s.Create(ctx, st)
}
