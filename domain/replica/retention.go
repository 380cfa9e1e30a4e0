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
func Retain(local []Snap, s State, keep int) (destroy []Snap) {
	local = sorted(local)
	needed := map[Snap]bool{}
	for _, r := range s.Replicas {
		if r.Snapshot != 0 {
			needed[Snap{Number: r.Snapshot, Epoch: r.SnapshotEpoch}] = true
		}
		if r.Fetching.Number != 0 {
			needed[Snap{Number: r.Fetching.Number, Epoch: r.Fetching.Epoch}] = true
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
