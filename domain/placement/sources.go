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
