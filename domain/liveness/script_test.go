package liveness

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/tests/scripttest"

	"github.com/ferry-csi/ferry/domain/replica"
)

// TestLivenessScripts replays the scripts in testdata/: lease-level races
// between nodes, each on its own clock (every at= is an instant on the
// clock of the node named first), over one volume's shared state changed
// only by compare-and-swap. Each command is followed by "----" and the
// output it must print. Run with -rewrite to accept new output after
// checking it by eye.
//
// Commands:
//
//	replica NODE N@E [active|released] [taker] [fetching=N@E]
//	                                the shared state's entry for NODE (epoch and
//	                                primary follow the active entry, or the
//	                                released one: the last primary, inactive;
//	                                taker: the primary acknowledged it, as in its
//	                                ledger), receiving N@E
//	join NODE                       a new copy on NODE joins the list (no data)
//	report NODE N@E                 NODE's copy reports snapshot N of epoch E
//	rf N                            the replication factor is edited to N
//	promote NODE                    NODE is promoted (a publish) by compare-and-swap
//	ack NODE                        NODE's guard acknowledges, as the active primary
//	                                of the newest state, every candidate taker: in
//	                                its ledger first, then by compare-and-swap
//	renew NODE sent=T               NODE's renewal sent at T succeeded: its lease
//	                                value changes, and it holds it until Held(T)
//	asks NODE at=T                  NODE's guard asks every taker of its ledger for
//	                                a promise at T (each observer answers at once)
//	write NODE at=T                 Decide for NODE at T for each term of its ledger
//	                                (its takers, its lease, its promises)
//	observe NODE at=T               NODE's observer reads every lease at T
//	blind NODE                      NODE's observer fails to read the leases
//	promise NODE to=ASKER at=T      NODE's observer answers ASKER's request at T
//	lost NODE at=T                  the nodes NODE's observer takes for lost at T
//	view NODE                       NODE reads the shared state (kept as its view;
//	                                its ledger learns from it)
//	takeovers NODE at=T lag=N       what NODE takes over on its view (Takeovers)
//	takeover NODE [from=LOST [released]] [lag=N]
//	                                each takeover NODE decided last (or one from
//	                                LOST, decided or not) as a compare-and-swap on
//	                                the newest state (replica.TakeoverReleased
//	                                for a released volume)
//	print                           the shared state
func TestLivenessScripts(t *testing.T) {
	scripttest.Each(t, func() scripttest.Runner {
		env := newScriptEnv()
		return func(out *strings.Builder, f []string) error {
			env.out = out
			return env.run(f)
		}
	})
}

type scriptEnv struct {
	state     replica.State
	lease     map[replica.Node]int           // each node's lease value (renewals so far)
	until     map[replica.Node]time.Duration // when each node's lease is held until, on its clock
	observers map[replica.Node]*Observer
	views     map[replica.Node]replica.State
	ledgers   map[replica.Node]*Ledger
	promises  map[replica.Node][]Promise
	decided   map[replica.Node][]Takeover
	out       *strings.Builder
}

func newScriptEnv() *scriptEnv {
	return &scriptEnv{state: replica.State{Volume: "v", ReplicationFactor: 2}, lease: map[replica.Node]int{}, until: map[replica.Node]time.Duration{},
		observers: map[replica.Node]*Observer{}, views: map[replica.Node]replica.State{}, ledgers: map[replica.Node]*Ledger{},
		promises: map[replica.Node][]Promise{}, decided: map[replica.Node][]Takeover{}}
}

// parseSnap reads N@EPOCH (its GUID made up from both).
func parseSnap(v string) (replica.Snap, error) {
	num, ep, ok := strings.Cut(v, "@")
	x, err1 := strconv.ParseUint(num, 10, 64)
	y, err2 := strconv.ParseUint(ep, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return replica.Snap{}, fmt.Errorf("snapshot %q: want N@EPOCH", v)
	}
	return replica.Snap{Number: replica.SnapshotNumber(x), Epoch: replica.Epoch(y), GUID: x*100 + y}, nil
}

func args(f []string) map[string]string {
	m := map[string]string{}
	for _, a := range f {
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

func (e *scriptEnv) at(a map[string]string, k string) (time.Duration, error) {
	d, err := time.ParseDuration(a[k])
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration", k, a[k])
	}
	return d, nil
}

func (e *scriptEnv) observer(n replica.Node) *Observer {
	if e.observers[n] == nil {
		e.observers[n] = NewObserver(cfg, n)
	}
	return e.observers[n]
}

func (e *scriptEnv) ledger(n replica.Node) *Ledger {
	if e.ledgers[n] == nil {
		e.ledgers[n] = NewLedger(n)
	}
	return e.ledgers[n]
}

// cas applies change to a copy of the newest state and keeps it if both
// the change and the state's invariants hold.
func (e *scriptEnv) cas(change func(*replica.State) error) error {
	next := cloneState(e.state)
	err := change(&next)
	if err == nil {
		err = next.Validate()
	}
	if err == nil {
		e.state = next
	}
	return err
}

func (e *scriptEnv) run(f []string) error {
	n := replica.Node("")
	if len(f) > 1 {
		n = replica.Node(f[1])
	}
	a := args(f[1:])
	switch f[0] {
	case "replica":
		snap, err := parseSnap(f[2])
		if err != nil {
			return err
		}
		r := replica.Replica{Node: n, Snapshot: snap.Number, SnapshotEpoch: snap.Epoch, SnapshotGUID: snap.GUID, Ready: true,
			Active: slices.Contains(f[3:], "active"), Taker: slices.Contains(f[3:], "taker")}
		if t, ok := a["fetching"]; ok {
			if r.Fetching, err = parseSnap(t); err != nil {
				return err
			}
		}
		replica.Join(&e.state, n)
		for i := range e.state.Replicas {
			if e.state.Replicas[i].Node == n {
				e.state.Replicas[i] = r
			}
		}
		e.state.Epoch = max(e.state.Epoch, r.SnapshotEpoch)
		if r.Active || slices.Contains(f[3:], "released") {
			e.state.Primary = n
		}
		if err := e.state.Validate(); err != nil {
			return err
		}
		if r.Taker {
			// The primary's ledger knew it before the flag was stored.
			e.ledger(e.state.Primary).Intend(e.state.Volume, e.state.Epoch, []replica.Node{n})
		}
	case "join":
		return e.cas(func(s *replica.State) error { replica.Join(s, n); return nil })
	case "report":
		sn, err := parseSnap(f[2])
		if err != nil {
			return err
		}
		return e.cas(func(s *replica.State) error { return replica.Report(s, n, sn, true) })
	case "rf":
		rf, err := strconv.Atoi(f[1])
		if err != nil {
			return err
		}
		e.state.ReplicationFactor = rf
	case "promote":
		if err := e.cas(func(s *replica.State) error { return replica.Promote(s, n) }); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s is the active primary of epoch %d\n", n, e.state.Epoch)
	case "ack":
		var acked []replica.Node
		err := e.cas(func(s *replica.State) error {
			acked = replica.Candidates(*s, n)
			e.ledger(n).Intend(s.Volume, s.Epoch, acked) // before the write
			return replica.Acknowledge(s, n, s.Epoch, acked)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s acknowledges %v in epoch %d\n", n, acked, e.state.Epoch)
	case "asks":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		for _, t := range e.ledger(n).AllTakers() {
			ok, span := e.observer(t).Promise(n, now)
			if ok {
				e.promises[n] = append(e.promises[n], Promise{From: t, Until: now + span})
			}
			fmt.Fprintf(e.out, "%s promises %s: %v for %s\n", t, n, ok, span)
		}
	case "renew":
		sent, err := e.at(a, "sent")
		if err != nil {
			return err
		}
		e.lease[n]++
		e.until[n] = cfg.Held(sent)
		fmt.Fprintf(e.out, "%s holds its lease until %s\n", n, e.until[n])
	case "write":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		terms := e.ledger(n).Terms()
		if len(terms) == 0 {
			fmt.Fprintf(e.out, "%s writes on: no term here has a taker\n", n)
		}
		for _, t := range terms {
			v := Decide(Standing{Now: now, LeaseUntil: e.until[n], Promises: e.promises[n]}, t.Takers)
			if v.MayWrite {
				fmt.Fprintf(e.out, "%s may write until %s: %s\n", n, v.Until, v.Reason)
			} else {
				fmt.Fprintf(e.out, "%s fences: %s\n", n, v.Reason)
			}
		}
	case "observe":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		values := map[replica.Node]string{}
		for node, v := range e.lease {
			values[node] = strconv.Itoa(v)
		}
		e.observer(n).Read(now, values)
	case "blind":
		e.observer(n).Blind()
	case "promise":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		ok, span := e.observer(n).Promise(replica.Node(a["to"]), now)
		fmt.Fprintf(e.out, "%s promises %s: %v for %s\n", n, a["to"], ok, span)
	case "lost":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "%s takes for lost: %v\n", n, e.observer(n).Lost(now))
	case "view":
		e.views[n] = cloneState(e.state)
		e.ledger(n).Learn(e.views[n])
	case "takeovers":
		now, err := e.at(a, "at")
		if err != nil {
			return err
		}
		lag, _ := strconv.ParseUint(a["lag"], 10, 64)
		view, ok := e.views[n]
		if !ok {
			return fmt.Errorf("%s has no view", n)
		}
		e.decided[n] = Takeovers([]replica.State{view}, e.observer(n).Lost(now), n, lag)
		if len(e.decided[n]) == 0 {
			fmt.Fprintf(e.out, "%s takes nothing over\n", n)
		}
		for _, t := range e.decided[n] {
			released := ""
			if t.Released {
				released = ", released"
			}
			fmt.Fprintf(e.out, "%s takes %s over from %s (its view: epoch %d%s)\n", n, t.Volume.Volume, t.Lost, t.Volume.Epoch, released)
		}
	case "takeover":
		lag, _ := strconv.ParseUint(a["lag"], 10, 64)
		todo := e.decided[n]
		if from, ok := a["from"]; ok {
			_, released := a["released"]
			todo = []Takeover{{Lost: replica.Node(from), Released: released}}
		}
		if len(todo) == 0 {
			fmt.Fprintf(e.out, "%s attempts no takeover\n", n)
		}
		for _, t := range todo {
			l := t.Lost
			next := cloneState(e.state)
			var err error
			var final replica.Snap
			if !t.Released {
				err = replica.Takeover(&next, n, l, lag)
			} else {
				final, err = replica.TakeoverReleased(&next, n, l, lag)
			}
			if err == nil {
				err = next.Validate()
			}
			if err != nil {
				fmt.Fprintf(e.out, "%s: takeover from %s -> %v\n", n, l, err)
				continue
			}
			e.state = next
			if final.Number != 0 {
				fmt.Fprintf(e.out, "%s: took the released volume over from %s: epoch %d, its final snapshot %s given up\n", n, l, e.state.Epoch, replica.SnapshotName(final))
				continue
			}
			fmt.Fprintf(e.out, "%s: took over from %s: epoch %d\n", n, l, e.state.Epoch)
		}
	case "print":
		fmt.Fprintf(e.out, "epoch=%d primary=%s\n", e.state.Epoch, e.state.Primary)
		for _, r := range e.state.Replicas {
			extra := ""
			if r.Fetching.Number != 0 {
				extra += fmt.Sprintf(" fetching=%d@%d", r.Fetching.Number, r.Fetching.Epoch)
			}
			if r.Forked.Epoch != 0 {
				extra += fmt.Sprintf(" forked=e%d@%d@%d", r.Forked.Epoch, r.Forked.At.Number, r.Forked.At.Epoch)
			}
			if r.Taker {
				extra += " taker"
			}
			fmt.Fprintf(e.out, "  %s: %d@%d active=%v ready=%v%s\n", r.Node, r.Snapshot, r.SnapshotEpoch, r.Active, r.Ready, extra)
		}
	default:
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}
