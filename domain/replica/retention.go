package replica

// Retain decides which of a replica's snapshots to destroy: it keeps the
// newest keep snapshots, every snapshot some replica reported as its
// newest (its base for the next incremental: destroying it would force
// that replica into a full resync), and every snapshot some replica
// recorded as its fetch target (it is receiving it, or received it and has
// not reported it yet: destroying it at the sender would make a transfer
// longer than the retention window start over forever). A base or target
// is released only once its replica reported a newer snapshot or left.
// The newest local snapshot is always kept.
//
// A base or target that is no longer here (destroyed before the report
// naming it landed: the sender pruned snapshots a replica fetched during
// an API server outage, unreported) keeps the newest local snapshot older
// than it instead: that replica rolls back to a snapshot it shares with
// this copy, which is that one or older, and fetches on top of it;
// destroying it too would leave the replica nothing in common, a full
// copy again.
func Retain(local []Snap, s State, keep int) (destroy []Snap) {
	local = sorted(local)
	here := map[Snap]bool{}
	for _, sn := range local {
		here[Snap{Number: sn.Number, Epoch: sn.Epoch}] = true
	}
	needed := map[Snap]bool{}
	need := func(n Snap) {
		needed[n] = true
		if here[n] {
			return
		}
		for i := len(local) - 1; i >= 0; i-- {
			if n.Newer(local[i]) {
				needed[Snap{Number: local[i].Number, Epoch: local[i].Epoch}] = true
				return
			}
		}
	}
	for _, r := range s.Replicas {
		if r.Snapshot != 0 {
			need(Snap{Number: r.Snapshot, Epoch: r.SnapshotEpoch})
		}
		if r.Fetching.Number != 0 {
			need(Snap{Number: r.Fetching.Number, Epoch: r.Fetching.Epoch})
		}
	}
	keep = max(keep, 1)
	for i, sn := range local {
		if i >= len(local)-keep || needed[Snap{Number: sn.Number, Epoch: sn.Epoch}] {
			continue
		}
		destroy = append(destroy, sn)
	}
	return destroy
}
