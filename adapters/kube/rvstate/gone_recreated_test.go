package rvstate

import (
	"testing"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
)

// Review 21 (changes 1 and 2): a ReplicatedVolume deleted and created
// again under the same name while the daemon's reader lags. pending
// replaces the unsent Gone by the new object's state, so the reader never
// sees Gone and the daemon never calls Takers.Forget. The ledger still
// holds the old volume's term (epoch 5); the new volume starts at a lower
// epoch, so Ledger.Intend ignores its takers ("an older epoch is
// ignored") while the compare-and-swap flags them all the same: a taker
// stored that the guard never asks for a promise (two writers after a
// cut). Volume IDs from the external-provisioner (pvc-<uid>) never repeat,
// so this needs a name reused by hand: low likelihood.
func TestAVolumeDeletedAndCreatedAgainWhileTheReaderLagsKeepsItsGone(t *testing.T) {
	old := replica.State{Volume: "pvc-x", ReplicationFactor: 2, Epoch: 5, Primary: "a",
		Replicas: []replica.Replica{{Node: "a", Snapshot: 9, SnapshotEpoch: 5, Active: true}, {Node: "b", Snapshot: 9, SnapshotEpoch: 5, Taker: true}}, Version: "10"}
	again := replica.State{Volume: "pvc-x", ReplicationFactor: 2, Epoch: 1, Primary: "a",
		Replicas: []replica.Replica{{Node: "a", Snapshot: 1, SnapshotEpoch: 1, Active: true}, {Node: "c", Snapshot: 1, SnapshotEpoch: 1}}, Version: "20"}

	ledger := liveness.NewLedger("a")
	ledger.Learn(old) // the daemon's view of the old volume

	p := newPending()
	p.seen(object(t, old))
	p.next() // sent
	p.deleted(object(t, old))
	p.seen(object(t, again)) // before the reader took the Gone
	sawGone := false
	for c, ok := p.next(); ok; c, ok = p.next() {
		if c.Gone {
			sawGone = true
			ledger.Forget(c.Volume)
			continue
		}
		ledger.Learn(c.State)
	}
	// The new volume's primary acknowledges c (failover.Takers: Intend
	// before the compare-and-swap).
	ledger.Intend("pvc-x", again.Epoch, []replica.Node{"c"})
	if got := ledger.Takers("pvc-x"); !sawGone && (len(got) != 1 || got[0] != "c") {
		t.Fatalf("the deletion never reached the reader (Gone coalesced into the new state) and the ledger keeps the old term: takers %v, want [c] (c is flagged in the state, and may take over without being asked for a promise)", got)
	}
}
