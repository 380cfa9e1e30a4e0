// Package volumelock serialises the use cases' operations per volume or
// snapshot name. A busy name is refused at once rather than waited on: CSI
// callers retry with backoff, and a queue of waiters would outlive their
// callers' deadlines.
package volumelock

import "sync"

// Locks serialises operations per key (a volume or snapshot name); a busy
// key is refused, not waited on.
type Locks struct {
	mu   sync.Mutex
	held map[string]struct{}
}

// New returns an empty lock table.
func New() *Locks { return &Locks{held: map[string]struct{}{}} }

// TryLock takes every key or none, and returns the function that releases
// them; ok is false when one of the keys is held.
func (l *Locks) TryLock(keys ...string) (unlock func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if _, busy := l.held[k]; busy {
			return nil, false
		}
	}
	for _, k := range keys {
		l.held[k] = struct{}{}
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range keys {
			delete(l.held, k)
		}
	}, true
}
