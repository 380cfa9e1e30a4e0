package liveness

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
)

// takenOver is volume vol after b took it over from a (epoch 4): b holds
// primary, a's entry is self (as a last reported it, or since).
func takenOver(vol volume.ID, primary replica.Snap, self replica.Replica) replica.State {
	self.Node = "a"
	return replica.State{Volume: vol, ReplicationFactor: 2, Epoch: 4, Primary: "b", Replicas: []replica.Replica{
		self,
		{Node: "b", Snapshot: primary.Number, SnapshotEpoch: primary.Epoch, SnapshotGUID: primary.GUID, Ready: true, Active: true},
	}}
}

func snap(n replica.SnapshotNumber, e replica.Epoch) replica.Snap {
	return replica.Snap{Number: n, Epoch: e, GUID: uint64(e)*1000 + uint64(n)}
}

func entry(h replica.Snap, ready bool) replica.Replica {
	return replica.Replica{Snapshot: h.Number, SnapshotEpoch: h.Epoch, SnapshotGUID: h.GUID, Ready: ready}
}

func notes(ns []CopyNote) []volume.ID {
	var out []volume.ID
	for _, n := range ns {
		out = append(out, n.Volume)
	}
	return out
}

func TestTheFencedTaintIsLiftedOnceTheNodeRenewsAndNoCopyHoldsWhatItsPrimaryLacks(t *testing.T) {
	const wait = 10 * time.Minute
	ready := LocalCopy{State: takenOver("ready", snap(9, 4), entry(snap(9, 4), true)), Pool: snap(9, 4)}
	// Behind, nothing newer than the primary: a full pool, a conflict.
	stuck := LocalCopy{State: takenOver("stuck", snap(9, 4), entry(snap(5, 3), false)), Pool: snap(5, 3)}
	// a was the primary of epoch 3: it took 8@3 (reported ready, as its
	// machine saw itself the newest) before b, at 7@3, took over.
	fencedReported := LocalCopy{State: takenOver("fenced", snap(7, 3), entry(snap(8, 3), true)), Pool: snap(8, 3)}
	// The same, 8@3 taken while cut off and never reported: the entry
	// lags the pool.
	fencedUnreported := LocalCopy{State: takenOver("unreported", snap(7, 3), entry(snap(7, 3), false)), Pool: snap(8, 3)}
	// Active here, being deleted, not listed: not looked at.
	active := LocalCopy{State: replica.State{Volume: "active", ReplicationFactor: 2, Epoch: 5, Primary: "a", Replicas: []replica.Replica{
		{Node: "a", Snapshot: 9, SnapshotEpoch: 5, Ready: true, Active: true}, {Node: "b", Snapshot: 3, SnapshotEpoch: 2}}}}
	deleting := stuck
	deleting.State.Volume, deleting.State.Deleting = "deleting", true
	unlisted := LocalCopy{State: replica.State{Volume: "unlisted", ReplicationFactor: 1, Epoch: 2, Primary: "c",
		Replicas: []replica.Replica{{Node: "c", Snapshot: 1, SnapshotEpoch: 2, Active: true}}}}
	// A secondary whose pool is ahead of its entry in the current epoch:
	// received, not yet reported; nothing of an ended term.
	ahead := LocalCopy{State: takenOver("ahead", snap(9, 4), entry(snap(8, 4), true)), Pool: snap(10, 4)}
	cases := []struct {
		name     string
		view     TaintView
		lift     bool
		waiting  []volume.ID
		unready  []volume.ID
		inReason string
	}{
		{"the lease not renewing keeps it", TaintView{Self: "a", Copies: []LocalCopy{ready}}, false, nil, nil, "not seen renewing"},
		{"every copy ready", TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{ready, ahead}}, true, nil, nil, "no copy here holds"},
		{"no copy at all", TaintView{Self: "a", Renewing: true}, true, nil, nil, "no copy here holds"},
		{"a stuck copy is reported, not waited for", TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{stuck, ready}}, true, nil, []volume.ID{"stuck"}, "1 not ready"},
		{"a fenced branch reported ready keeps it", TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{ready, fencedReported}}, false, []volume.ID{"fenced"}, nil, "fenced branch"},
		{"a fenced branch only the pool shows keeps it", TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{fencedUnreported, stuck}}, false, []volume.ID{"unreported"}, []volume.ID{"stuck"}, "fenced branch"},
		{"not for ever", TaintView{Self: "a", Renewing: true, Waited: wait, Copies: []LocalCopy{fencedReported, stuck}}, true, []volume.ID{"fenced"}, []volume.ID{"stuck"}, "so as not to hold the node"},
		{"just before the bound", TaintView{Self: "a", Renewing: true, Waited: wait - 1, Copies: []LocalCopy{fencedReported}}, false, []volume.ID{"fenced"}, nil, "at most"},
		{"active, deleting and unlisted copies are not looked at", TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{active, deleting, unlisted}}, true, nil, nil, "no copy here holds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := LiftTaint(c.view, wait)
			if v.Lift != c.lift || !slices.Equal(notes(v.Waiting), c.waiting) || !slices.Equal(notes(v.Unready), c.unready) || !strings.Contains(v.Reason, c.inReason) {
				t.Fatalf("%+v", v)
			}
		})
	}
}

// Once the new primary snapshots in its own epoch, the state no longer
// tells what it held when its epoch began: a fenced branch then looks like
// a copy that is behind. It is reported, and the node not held for it:
// its volume manager still keeps it aside before any rollback.
func TestAFencedBranchTheStateCanNoLongerTellIsReportedAsNotReady(t *testing.T) {
	c := LocalCopy{State: takenOver("v", snap(9, 4), entry(snap(8, 3), false)), Pool: snap(8, 3)}
	v := LiftTaint(TaintView{Self: "a", Renewing: true, Copies: []LocalCopy{c}}, time.Hour)
	if !v.Lift || len(v.Waiting) != 0 || len(v.Unready) != 1 || !strings.Contains(v.Unready[0].Why, "8 of epoch 3, the newest is 9 of epoch 4 on b") {
		t.Fatalf("%+v", v)
	}
}

func TestAnOwnLeaseIsRenewingOnlyOnceItsValueChangedAndUntilItStopsForDurationPlusMargin(t *testing.T) {
	o := NewObserver(cfg, "a")
	o.Read(0, leases("a", "1"))
	if o.Renewing("a", 0) {
		t.Fatal("renewing on the first sight: a restarted daemon has not seen a renewal yet")
	}
	o.Read(s, leases("a", "2"))
	if !o.Renewing("a", s) || !o.Renewing("a", 7*s-1) {
		t.Fatal("not renewing after a change")
	}
	if o.Renewing("a", 7*s) {
		t.Fatal("renewing although unchanged for duration + margin: the others take it for lost")
	}
	o.Blind()
	if o.Renewing("a", 2*s) {
		t.Fatal("renewing while blind")
	}
	o.Read(60*s, leases("a", "3")) // back after an outage: the age restarts, no renewal seen yet
	if o.Renewing("a", 60*s) {
		t.Fatal("renewing on the first read after a blind spell")
	}
	o.Read(61*s, leases("a", "4"))
	if !o.Renewing("a", 61*s) || o.Renewing("z", 61*s) {
		t.Fatal("a renews again; z was never seen")
	}
}

// The cadence: no check while the lease is not renewing; then at once,
// and at most once per Check. The fenced wait runs while the node is found
// tainted with its lease renewing, and restarts when the lease stops.
func TestTheTaintWatchChecksAtMostOncePerCheckAndBoundsTheFencedWait(t *testing.T) {
	rule := TaintRule{Check: 5 * s, FencedWait: 60 * s}
	w := NewTaintWatch(rule, "a")
	fenced := []LocalCopy{{State: takenOver("fenced", snap(7, 3), entry(snap(8, 3), true))}}
	if w.Due(0, false) {
		t.Fatal("due while the lease is not renewing")
	}
	var checks []time.Duration
	for at := time.Duration(0); at <= 12*s; at += s {
		if w.Due(at, true) {
			checks = append(checks, at)
		}
	}
	if !slices.Equal(checks, []time.Duration{0, 5 * s, 10 * s}) {
		t.Fatalf("checks at %v", checks)
	}
	if v := w.Tainted(10*s, fenced); v.Lift {
		t.Fatalf("lifted at once: %+v", v)
	}
	w.Due(69*s, true) // last check at 10 s: due
	if v := w.Tainted(69*s, fenced); v.Lift {
		t.Fatalf("lifted after 59 s of a 60 s wait: %+v", v)
	}
	w.Due(75*s, false) // the lease stops: the wait restarts
	w.Due(76*s, true)
	if v := w.Tainted(76*s, fenced); v.Lift {
		t.Fatalf("the wait did not restart: %+v", v)
	}
	w.Due(136*s, true)
	if v := w.Tainted(136*s, fenced); !v.Lift || len(v.Waiting) != 1 {
		t.Fatalf("not lifted after the wait: %+v", v)
	}
	w.Untainted()
	w.Due(141*s, true)
	if v := w.Tainted(141*s, fenced); v.Lift {
		t.Fatalf("a new taint waits again: %+v", v)
	}
	if d := (TaintRule{}).WithDefaults(cfg); d.Check != 5*cfg.Renew || d.FencedWait != DefaultFencedWait {
		t.Fatalf("defaults %+v", d)
	}
}
