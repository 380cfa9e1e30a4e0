package replica

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/tests/scripttest"
)

// TestMachineScripts replays the scripts in testdata/: each is a sequence
// of commands, each followed by "----" and the output it must print. Run
// with -rewrite to accept new output after checking it by eye.
//
// Commands:
//
//	state rf=N epoch=E primary=NODE   the shared state (replicas join later)
//	machine NODE [lag=N keep=N every=N] a replica's machine
//	local NODE N@E:GUID ...           what NODE's store holds
//	step NODE [N]                     observe state and local, run actions until none (at most N)
//	stabilize                         step every node until nothing happens
//	tick [NODE]                       time passes (for one node or all)
//	ack NODE [TAKER...]               NODE, the active primary, acknowledges every
//	                                  candidate (Candidates) as a taker, or the
//	                                  TAKERs named
//	promote NODE | takeover NODE LOST [lag=N] [released]
//	                                  change the primary, as publish or failover do (a
//	                                  takeover is judged with NODE's allowed lag, or N;
//	                                  released: TakeoverReleased, naming what it gave up)
//	release NODE                      unpublish: NODE's primary hands over
//	write NODE                        NODE's dataset changes after its newest snapshot
//	slow NODE                         NODE's next transfer stays in flight until "finish NODE"
//	finish NODE                       NODE's transfer in flight ends (it fails if the sender
//	                                  destroyed a snapshot it needs meanwhile)
//	terminate NODE [gone]             SIGTERM for NODE's replica
//	fail NODE KIND REASON             NODE's next action of KIND (fetch, snapshot, ...) fails
//	acquire NODE | abandon NODE       publish read/write on NODE asks it to become the
//	                                  primary | the publish gave up
//	acquired NODE...                  print each node's publish: acquired or what it waits for
//	released NODE...                  print each node's unpublish: released, or why it was lost
//	decide NODE                       observe and pick NODE's next action, without doing it
//	do NODE                           carry out NODE's decided action (on today's state)
//	restart NODE                      NODE's volume manager restarts (a new machine)
//	rf N                              the owner edits the replication factor
//	cantell NODE                      NODE's pool tells when nothing was written since
//	                                  the newest snapshot (OpenZFS written)
//	unreadable NODE...                the shared state cannot be read from NODE (the API
//	                                  server away, or NODE cut off from it): NODE's steps
//	                                  observe StateUnreadable; a compare-and-swap by NODE
//	                                  fails (and is printed as an error)
//	readable NODE...                  NODE reads the shared state again
//	print                             the shared state and every store
func TestMachineScripts(t *testing.T) {
	scripttest.Each(t, func() scripttest.Runner {
		env := newScriptEnv()
		return func(out *strings.Builder, f []string) error {
			env.out = out
			return env.run(f)
		}
	})
}

type scriptEnv struct {
	state    State
	machines map[Node]*Machine
	local    map[Node][]Snap
	guid     uint64
	out      *strings.Builder
	failNext map[Node][2]string // the kind of action to fail, and why
	dirty    map[Node]bool      // changed since the newest snapshot
	slow     map[Node]bool      // the next transfer stays in flight
	canTell  map[Node]bool      // the pool tells an interval without writes (OpenZFS written)
	inFlight map[Node]Action    // transfers in flight
	decided  map[Node]Action    // decided on an earlier view, not yet carried out
	blind    map[Node]bool      // cannot read (nor write) the shared state
}

func kv(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

func atoi(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

func parseSnap(s string) (Snap, error) {
	ne, g, _ := strings.Cut(s, ":")
	n, e, ok := strings.Cut(ne, "@")
	num, err1 := strconv.ParseUint(n, 10, 64)
	ep, err2 := strconv.ParseUint(e, 10, 64)
	guid, err3 := strconv.ParseUint(g, 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return Snap{}, fmt.Errorf("snapshot %q: want N@EPOCH:GUID", s)
	}
	return Snap{Number: SnapshotNumber(num), Epoch: Epoch(ep), GUID: guid}, nil
}

func (s Snap) String() string { return fmt.Sprintf("%d@%d:%d", s.Number, s.Epoch, s.GUID) }

func (e *scriptEnv) nodes() []Node {
	var ns []Node
	for n := range e.machines {
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	return ns
}

func (e *scriptEnv) run(f []string) error {
	switch f[0] {
	case "state":
		a := kv(f[1:])
		e.state = State{Volume: "v", ReplicationFactor: atoi(a["rf"], 1), Epoch: Epoch(atoi(a["epoch"], 0)), Primary: Node(a["primary"])}
	case "machine":
		a := kv(f[2:])
		n := Node(f[1])
		e.machines[n] = NewMachine(MachineConfig{Self: n, AllowedLag: uint64(atoi(a["lag"], 0)), Keep: atoi(a["keep"], 2), SnapshotEvery: atoi(a["every"], 1)})
	case "local":
		var snaps []Snap
		for _, x := range f[2:] {
			s, err := parseSnap(x)
			if err != nil {
				return err
			}
			snaps = append(snaps, s)
		}
		e.local[Node(f[1])] = snaps
	case "step":
		e.step(Node(f[1]), atoi(f[len(f)-1], 20))
	case "stabilize":
		for i := 0; i < 20; i++ {
			before := e.out.Len()
			for _, n := range e.nodes() {
				e.step(n, 20)
			}
			if e.out.Len() == before {
				return nil
			}
		}
		return fmt.Errorf("did not stabilize in 20 rounds")
	case "tick":
		for _, n := range e.nodes() {
			if len(f) == 1 || Node(f[1]) == n {
				_ = e.machines[n].Step(Tick{})
			}
		}
	case "fail":
		e.failNext[Node(f[1])] = [2]string{f[2], strings.Join(f[3:], " ")}
	case "promote":
		return Promote(&e.state, Node(f[1]))
	case "ack":
		// The primary's guard acknowledges every replica holding a
		// snapshot as a taker (what the publish does before the pod
		// mounts, and the guard whenever a copy reports).
		n := Node(f[1])
		return e.cas(func(s *State) error {
			takers := Candidates(*s, n)
			if len(f) > 2 {
				takers = nil
				for _, t := range f[2:] {
					takers = append(takers, Node(t))
				}
			}
			return Acknowledge(s, n, s.Epoch, takers)
		})
	case "takeover":
		lag := uint64(1)
		if m, ok := e.machines[Node(f[1])]; ok {
			lag = m.cfg.AllowedLag
		}
		a := kv(f[3:])
		if l, ok := a["lag"]; ok {
			lag = uint64(atoi(l, int(lag)))
		}
		if _, ok := a["released"]; ok {
			return e.cas(func(s *State) error {
				final, err := TakeoverReleased(s, Node(f[1]), Node(f[2]), lag)
				if err == nil {
					fmt.Fprintf(e.out, "%s took the released volume over from %s (epoch %d), giving up %v\n", f[1], f[2], s.Epoch, final)
				}
				return err
			})
		}
		return e.cas(func(s *State) error { return Takeover(s, Node(f[1]), Node(f[2]), lag) })
	case "release":
		return e.machines[Node(f[1])].Step(Release{})
	case "acquire":
		return e.machines[Node(f[1])].Step(Acquire{})
	case "abandon":
		return e.machines[Node(f[1])].Step(Abandon{})
	case "restart":
		// The volume manager restarts: a new machine, same config; the
		// store and the shared state stay.
		n := Node(f[1])
		e.machines[n] = NewMachine(e.machines[n].cfg)
		delete(e.inFlight, n)
	case "decide":
		n := Node(f[1])
		m := e.machines[n]
		_ = m.Step(e.observe(n))
		_ = m.Step(e.localRead(n))
		a, ok := m.Next()
		if !ok {
			return fmt.Errorf("%s has nothing to do", n)
		}
		e.decided[n] = a
		fmt.Fprintf(e.out, "%s decides: %s\n", n, describe(a))
	case "do":
		n := Node(f[1])
		a, ok := e.decided[n]
		if !ok {
			return fmt.Errorf("%s decided nothing", n)
		}
		delete(e.decided, n)
		err := e.exec(n, a)
		if err != nil {
			fmt.Fprintf(e.out, "%s: %s -> %v\n", n, describe(a), err)
		} else {
			fmt.Fprintf(e.out, "%s: %s\n", n, describe(a))
		}
		return e.machines[n].Step(ActionDone{Action: a, Err: err})
	case "rf":
		e.state.ReplicationFactor = atoi(f[1], 1)
	case "acquired":
		// Prints each listed node's publish: acquired, or what it waits for.
		for _, x := range f[1:] {
			m := e.machines[Node(x)]
			on, why := m.Acquiring()
			fmt.Fprintf(e.out, "%s: acquired=%v acquiring=%v %s\n", x, m.Acquired(), on, why)
		}
	case "released":
		for _, x := range f[1:] {
			m := e.machines[Node(x)]
			fmt.Fprintf(e.out, "%s: released=%v lost=%q\n", x, m.Released(), m.ReleaseLost())
		}
	case "write":
		e.dirty[Node(f[1])] = true
	case "cantell":
		e.canTell[Node(f[1])] = true
	case "slow":
		e.slow[Node(f[1])] = true
	case "finish":
		n := Node(f[1])
		a, ok := e.inFlight[n]
		if !ok {
			return fmt.Errorf("%s has no transfer in flight", n)
		}
		delete(e.inFlight, n)
		err := e.land(n, a)
		if err != nil {
			fmt.Fprintf(e.out, "%s: %s finished -> %v\n", n, describe(a), err)
		} else {
			fmt.Fprintf(e.out, "%s: %s finished\n", n, describe(a))
		}
		return e.machines[n].Step(ActionDone{Action: a, Err: err})
	case "terminate":
		return e.machines[Node(f[1])].Step(Terminate{})
	case "unreadable", "readable":
		for _, n := range f[1:] {
			e.blind[Node(n)] = f[0] == "unreadable"
		}
	case "print":
		fmt.Fprintf(e.out, "epoch=%d primary=%s rf=%d\n", e.state.Epoch, e.state.Primary, e.state.ReplicationFactor)
		for _, r := range e.state.Replicas {
			fetching := ""
			if r.Fetching.Number != 0 {
				fetching = fmt.Sprintf(" fetching=%d@%d", r.Fetching.Number, r.Fetching.Epoch)
			}
			if r.Forked.Epoch != 0 {
				fetching += fmt.Sprintf(" forked=e%d@%v", r.Forked.Epoch, r.Forked.At)
			}
			fmt.Fprintf(e.out, "  %s: %d@%d active=%v ready=%v%s\n", r.Node, r.Snapshot, r.SnapshotEpoch, r.Active, r.Ready, fetching)
		}
		for _, n := range e.nodes() {
			fmt.Fprintf(e.out, "  store %s: %v\n", n, e.local[n])
		}
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

// step lets node observe the world and carries out its actions until it
// has none (or one stays in flight), printing each.
func (e *scriptEnv) step(n Node, limit int) {
	m := e.machines[n]
	if _, busy := e.inFlight[n]; busy {
		return
	}
	for i := 0; i < limit; i++ {
		_ = m.Step(e.observe(n))
		_ = m.Step(e.localRead(n))
		a, ok := m.Next()
		if !ok {
			return
		}
		err := e.exec(n, a)
		if err == errInFlight {
			fmt.Fprintf(e.out, "%s: %s (in flight)\n", n, describe(a))
			return
		}
		if err != nil {
			fmt.Fprintf(e.out, "%s: %s -> %v\n", n, describe(a), err)
		} else {
			fmt.Fprintf(e.out, "%s: %s\n", n, describe(a))
		}
		_ = m.Step(ActionDone{Action: a, Err: err})
	}
}

// observe is what node learns when it reads the shared state: the state,
// or that it cannot be read.
func (e *scriptEnv) observe(n Node) Event {
	if e.blind[n] {
		return StateUnreadable{}
	}
	return Observed{State: cloneState(e.state)}
}

// localRead is what node's store holds; a pool that can tell (cantell)
// says whether anything was written since the newest snapshot.
func (e *scriptEnv) localRead(n Node) LocalRead {
	return LocalRead{Snaps: append([]Snap(nil), e.local[n]...), Unchanged: e.canTell[n] && !e.dirty[n]}
}

// cloneState copies a state; Replica holds no pointers, so copying the
// slice suffices.
func cloneState(s State) State {
	s.Replicas = append([]Replica(nil), s.Replicas...)
	return s
}

func describe(a Action) string {
	switch a := a.(type) {
	case ReportSnapshot:
		return fmt.Sprintf("report %v ready=%v", a.Snap, a.Ready)
	case ReadPeer:
		return "read peer " + string(a.Peer)
	case Fetch:
		stale := ""
		if a.Stale {
			stale = " (stale view: unrecorded)"
		}
		if a.Base == nil {
			return fmt.Sprintf("fetch full %v from %s%s", a.Target, a.Peer, stale)
		}
		return fmt.Sprintf("fetch %v..%v from %s%s", *a.Base, a.Target, a.Peer, stale)
	case Rollback:
		keep := ""
		if a.KeepAs != "" {
			keep = " keeping " + a.KeepAs
		}
		return fmt.Sprintf("rollback to %v discarding %v%s: %s", a.To, a.Discard, keep, a.Reason)
	case Replace:
		keep := ""
		if a.KeepAs != "" {
			keep = " keeping " + a.KeepAs
		}
		return fmt.Sprintf("replace with %v from %s discarding %v%s: %s", a.Target, a.Peer, a.Discard, keep, a.Reason)
	case TakeSnapshot:
		return fmt.Sprintf("snapshot %d of epoch %d", a.Number, a.Epoch)
	case StepDown:
		return fmt.Sprintf("step down from epoch %d with final %v", a.Epoch, a.Final)
	case ForgetFetch:
		return fmt.Sprintf("forget fetch target %v", a.Target)
	case DestroySnapshots:
		return fmt.Sprintf("destroy %v", a.Snaps)
	case LeaveVolume:
		if a.KeepAs != "" {
			return "leave keeping " + a.KeepAs
		}
		return "leave"
	case BecomePrimary:
		return "become primary"
	case Alert:
		return "alert: " + a.Reason
	}
	return fmt.Sprintf("%T", a)
}

var errInFlight = errors.New("in flight")

// exec carries out an action on the script's world, as the volume manager
// does on the stores and the cluster state.
func (e *scriptEnv) exec(n Node, a Action) error {
	if f, ok := e.failNext[n]; ok && strings.HasPrefix(describe(a), f[0]) {
		delete(e.failNext, n)
		return errors.New(f[1])
	}
	if e.blind[n] && needsState(a) {
		return fmt.Errorf("%s cannot reach the shared state: a compare-and-swap on a stale view", n)
	}
	switch a := a.(type) {
	case ReportSnapshot:
		return e.cas(func(s *State) error { Join(s, n); return Report(s, n, a.Snap, a.Ready) })
	case ReadPeer:
		return e.machines[n].Step(PeerRead{Peer: a.Peer, Snaps: append([]Snap(nil), e.local[a.Peer]...)})
	case Fetch:
		return e.transfer(n, a, a.Target)
	case Replace:
		return e.transfer(n, a, a.Target)
	case Rollback:
		if err := e.cas(func(s *State) error { return Report(s, n, a.To, false) }); err != nil {
			return err
		}
		var kept []Snap
		for _, s := range e.local[n] {
			if !s.Newer(a.To) {
				kept = append(kept, s)
			}
		}
		e.local[n] = kept
		e.dirty[n] = false
	case TakeSnapshot:
		if a.Periodic && !e.dirty[n] && len(e.local[n]) > 0 && e.canTell[n] {
			return ErrUnchanged
		}
		e.dirty[n] = false
		e.guid++
		e.local[n] = append(e.local[n], Snap{Number: a.Number, Epoch: a.Epoch, GUID: e.guid})
	case StepDown:
		return e.cas(func(s *State) error { return Demote(s, n, a.Epoch, a.Final) })
	case ForgetFetch:
		return e.cas(func(s *State) error { return ClearFetch(s, n, a.Target) })
	case DestroySnapshots:
		gone := map[Snap]bool{}
		for _, s := range a.Snaps {
			gone[s] = true
		}
		var kept []Snap
		for _, s := range e.local[n] {
			if !gone[s] {
				kept = append(kept, s)
			}
		}
		e.local[n] = kept
	case LeaveVolume:
		holds := a.Holds
		holds.Kept = a.KeepAs // kept aside first (SnapshotStore.KeepAside), when named
		if err := e.cas(func(s *State) error { _, err := Leave(s, n, holds, a.VolumeGone); return err }); err != nil {
			return err
		}
		e.local[n] = nil
	case BecomePrimary:
		return e.cas(func(s *State) error { return Promote(s, n) })
	}
	return nil
}

// cas applies fn to a copy of the state and keeps the result only if fn
// succeeds and the result is valid, as ClusterState.Update does.
func (e *scriptEnv) cas(fn func(*State) error) error {
	next := cloneState(e.state)
	if err := fn(&next); err != nil {
		return err
	}
	if err := next.Validate(); err != nil {
		return err
	}
	e.state = next
	return nil
}

// holds reports whether node's store holds snapshot x.
func (e *scriptEnv) holds(node Node, x Snap) bool {
	for _, s := range e.local[node] {
		if s == x {
			return true
		}
	}
	return false
}

// land completes a transfer as the store would: the sender must still hold
// the target (and the base); an incremental refuses a changed dataset; a
// replacement records that nothing is held before the old copy goes.
func (e *scriptEnv) land(n Node, a Action) error {
	switch a := a.(type) {
	case Fetch:
		if !e.holds(a.Peer, a.Target) || (a.Base != nil && !e.holds(a.Peer, *a.Base)) {
			return fmt.Errorf("%s no longer holds the snapshots of the stream", a.Peer)
		}
		if a.Base != nil && e.dirty[n] {
			return fmt.Errorf("receive: %w", ErrModified)
		}
		var got []Snap
		for _, s := range e.local[a.Peer] {
			if (a.Base == nil || s.Newer(*a.Base)) && !s.Newer(a.Target) {
				got = append(got, s)
			}
		}
		if a.Base == nil {
			got = got[len(got)-1:] // a full stream brings its target only
		}
		e.local[n] = append(e.local[n], got...)
	case Replace:
		if !e.holds(a.Peer, a.Target) {
			return fmt.Errorf("%s no longer holds the snapshot of the stream", a.Peer)
		}
		if err := e.cas(func(s *State) error { return Report(s, n, Snap{}, false) }); err != nil {
			return err
		}
		e.local[n] = []Snap{a.Target}
		e.dirty[n] = false
	}
	return nil
}

// needsState: carrying a out writes the shared state (a compare-and-swap,
// or a fetch that records its target first).
func needsState(a Action) bool {
	switch a := a.(type) {
	case ReadPeer, TakeSnapshot, DestroySnapshots, Alert:
		return false
	case Fetch:
		return !a.Stale
	}
	return true
}

// transfer records the target (not on a stale view), then lands the
// transfer now, or leaves it in flight when the script made the node slow.
func (e *scriptEnv) transfer(n Node, a Action, target Snap) error {
	if f, ok := a.(Fetch); !ok || !f.Stale {
		if err := e.cas(func(s *State) error { return RecordFetch(s, n, target) }); err != nil {
			return err
		}
	}
	if e.slow[n] {
		delete(e.slow, n)
		e.inFlight[n] = a
		return errInFlight
	}
	return e.land(n, a)
}
