// Package failover holds the daemon's node-loss use cases (issue 14,
// seed 000's fencing): the Guard keeps this node's lease and fences the
// primaries here when the node may no longer write; the Survivor watches
// every other node's lease and, when one is lost, takes over the volumes
// whose successor this node is; Takers records which copies may take this
// node's primaries over, before any of them is told. The rules (when a node may write, when an
// observer may take a node for lost, who takes over, why a copy here is
// fenced or given back: liveness/fence.go, what a takeover owes:
// liveness/aftermath.go) are domain/liveness's; these use cases measure
// time, read, ask the domain and hand the answer to the ports.
package failover

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Config is the node's failover settings.
type Config struct {
	Node  replica.Node
	Lease liveness.Config
	// Lag is how many snapshots a successor may be behind the newest
	// reported and still take over (the volume managers' --allowed-lag).
	Lag uint64
	// Taint is when the node checks its own fenced taint and how long a
	// fenced branch may keep it; fields left zero take
	// liveness.DefaultTaintRule(Lease).
	Taint liveness.TaintRule
	// FenceNode, when set, fences a lost node from outside before any of
	// its volumes is taken over (once per loss): a node paused past its
	// lease, then resumed, cannot write once more after the takeover. A
	// failure holds the takeover back (retried every period).
	FenceNode ports.NodeFencer
}

// Clock is a monotonic clock: the time since some fixed instant of this
// process. No instant of it is ever compared with another node's.
type Clock func() time.Duration

// MonotonicClock returns a Clock reading Go's monotonic clock.
func MonotonicClock() Clock {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// Volumes is the daemon's last known state of every replicated volume (fed
// by ports.StateFeed, which drops no change: the view is as current as the
// watch, deletions included): what the Guard fences from when the API
// server cannot be read. A hint for fencing only; every takeover decides
// again on a fresh read by compare-and-swap.
type Volumes struct {
	mu     sync.Mutex
	states map[volume.ID]replica.State
}

// NewVolumes returns an empty view.
func NewVolumes() *Volumes { return &Volumes{states: map[volume.ID]replica.State{}} }

// Saw records a volume's state as just seen.
func (v *Volumes) Saw(st replica.State) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.states[st.Volume] = st
}

// Apply records a change sent by the feed: a state seen, or the volume
// gone.
func (v *Volumes) Apply(c ports.StateChange) {
	if c.Gone {
		v.Gone(c.Volume)
		return
	}
	v.Saw(c.State)
}

// Gone forgets a volume.
func (v *Volumes) Gone(id volume.ID) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.states, id)
}

// Known reports whether the view holds a state of volume id.
func (v *Volumes) Known(id volume.ID) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.states[id]
	return ok
}

// All lists every volume's state, by ID.
func (v *Volumes) All() []replica.State {
	v.mu.Lock()
	out := make([]replica.State, 0, len(v.states))
	for _, st := range v.states {
		out = append(out, st)
	}
	v.mu.Unlock()
	sortStates(out)
	return out
}

// PrimaryOn lists the volumes whose active primary is node, by ID.
func (v *Volumes) PrimaryOn(node replica.Node) []replica.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []replica.State
	for _, st := range v.states {
		if r, ok := st.Replica(node); ok && st.Primary == node && r.Active {
			out = append(out, st)
		}
	}
	sortStates(out)
	return out
}

func sortStates(out []replica.State) {
	slices.SortFunc(out, func(a, b replica.State) int { return strings.Compare(string(a.Volume), string(b.Volume)) })
}
