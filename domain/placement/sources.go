package placement

import (
	"slices"

	"github.com/ferry-csi/ferry/domain/replica"
)

// SnapshotSources orders the nodes a node asks for a CSI snapshot its own
// pool lacks (a restore scheduled away from the snapshot): the nodes that
// hold a copy of the snapshot's volume first (the snapshot was taken by
// one of them, on the primary of the time), then every other node; each
// once, never self, by name within each group, so that a retried restore
// asks in the same order.
func SnapshotSources(self replica.Node, copies, nodes []replica.Node) []replica.Node {
	seen := map[replica.Node]bool{self: true, "": true}
	var first, rest []replica.Node
	for _, n := range copies {
		if !seen[n] {
			seen[n] = true
			first = append(first, n)
		}
	}
	for _, n := range nodes {
		if !seen[n] {
			seen[n] = true
			rest = append(rest, n)
		}
	}
	slices.Sort(first)
	slices.Sort(rest)
	return append(first, rest...)
}

// CloneSource is where a node without a copy of a replicated volume clones
// it from: the copy holding the volume's newest snapshot (never one on a
// fenced branch), and that snapshot, which the clone is made of: the
// volume as of its last snapshot (its final one, once no pod writes it),
// fetched whole over the peer stream. False when no copy other than self
// holds a snapshot yet.
func CloneSource(s replica.State, self replica.Node) (replica.Node, replica.Snap, bool) {
	r, ok := s.NewestReplica()
	if !ok || r.Node == self {
		return "", replica.Snap{}, false
	}
	return r.Node, r.Holds(), true
}
