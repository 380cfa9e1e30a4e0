package zfs

import (
	"context"
	"sync"
	"time"
)

// poolSync runs `zpool sync` for Unchanged, shared by every caller of one
// store: OpenZFS updates the written property only when a transaction
// group is synced (every few seconds), so a volume written a moment ago
// can still read written=0. A read of 0 is trusted only after a sync that
// started after it. Callers that ask while a sync runs share the next one
// (it starts after all of them), so a round over many idle volumes costs
// about two syncs, not one per volume.
type poolSync struct {
	mu        sync.Mutex
	cond      *sync.Cond
	started   uint64 // syncs started
	completed uint64 // the newest finished sync (numbers in start order)
	running   bool
	err       error // the result of sync number completed
	waiters   int   // callers waiting on a running sync (for tests)
}

// poolSyncTimeout bounds one `zpool sync`; past it Unchanged cannot tell.
const poolSyncTimeout = 30 * time.Second

func newPoolSync() *poolSync {
	p := &poolSync{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// after returns once a sync that started after the call has finished,
// with that sync's error. run carries out one sync.
func (p *poolSync) after(ctx context.Context, run func(context.Context) error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := p.started + 1 // a sync running now may have started before our read
	for p.completed < want {
		if p.running {
			p.waiters++
			p.cond.Wait()
			p.waiters--
			continue
		}
		p.running = true
		p.started++
		n := p.started
		p.mu.Unlock()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), poolSyncTimeout)
		err := run(sctx)
		cancel()
		p.mu.Lock()
		p.running = false
		p.completed, p.err = n, err
		p.cond.Broadcast()
	}
	return p.err
}
