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

// CloneSources is where a node without a copy of a replicated volume
// clones it from, in the order to try: the snapshot the clone is made of
// (the volume's newest, its final one once no pod writes it) and every
// copy other than self that holds exactly it, the newest replica's first,
// then by name. Never a copy on a fenced branch, nor a snapshot of a
// history a takeover gave up; nothing while the state is rebuilt from the
// copies (some have not said what they hold) or the volume is deleted.
// Empty when no other copy holds a snapshot yet.
func CloneSources(s replica.State, self replica.Node) (replica.Snap, []replica.Node) {
	if s.Deleting || len(s.Awaiting) > 0 {
		return replica.Snap{}, nil
	}
	newest, ok := s.NewestReplica()
	if !ok || s.Fenced(newest.Holds()) {
		return replica.Snap{}, nil
	}
	snap := newest.Holds()
	var out []replica.Node
	if newest.Node != self {
		out = append(out, newest.Node)
	}
	for _, r := range s.Replicas { // sorted by node
		if r.Node != self && r.Node != newest.Node && !r.OnFencedBranch() && r.Holds() == snap {
			out = append(out, r.Node)
		}
	}
	if len(out) == 0 {
		return replica.Snap{}, nil
	}
	return snap, out
}
