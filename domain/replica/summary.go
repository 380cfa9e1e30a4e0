package replica

// Phase is a volume's one-word health, shown to operators.
type Phase string

const (
	// PhasePending: no replica is ready yet (being created, or every copy
	// is still catching up after a loss).
	PhasePending Phase = "Pending"
	// PhaseAvailable: at least ReplicationFactor replicas are ready.
	PhaseAvailable Phase = "Available"
	// PhaseDegraded: some, but fewer than ReplicationFactor, are ready.
	PhaseDegraded Phase = "Degraded"
	// PhaseTerminating: the volume is being deleted; replicas are
	// destroying their copies.
	PhaseTerminating Phase = "Terminating"
)

// Summary is what an operator reads at a glance (kubectl get rv): derived
// from the state, never decided on.
type Summary struct {
	// Ready counts replicas whose entry says Ready.
	Ready int
	// Newest is the newest snapshot any replica holds, by (epoch, number)
	// (Number 0: none yet).
	Newest Snap
	// MaxLag is how many snapshot numbers the most lagging replica is
	// behind Newest (0 when every replica holds it).
	MaxLag SnapshotNumber
	Phase  Phase
	// NewestTaken is when Newest was taken (Unix seconds), as the
	// replica holding it said; 0 when none said.
	NewestTaken int64
	// Receiving counts the replicas receiving a snapshot now (their
	// Fetching target is set).
	Receiving int
}

// Summarize derives the summary of s; deleting says the volume is being
// deleted (Kubernetes: the object has a deletion timestamp).
func Summarize(s State, deleting bool) Summary {
	var sum Summary
	if n, ok := s.NewestReplica(); ok {
		sum.Newest = n.Holds()
	}
	for _, r := range s.Replicas {
		if r.Ready {
			sum.Ready++
		}
		if r.Fetching.Number != 0 {
			sum.Receiving++
		}
		if sum.Newest.Number != 0 && r.Holds() == sum.Newest && r.SnapshotTaken > sum.NewestTaken {
			sum.NewestTaken = r.SnapshotTaken
		}
		if r.Snapshot < sum.Newest.Number {
			sum.MaxLag = max(sum.MaxLag, sum.Newest.Number-r.Snapshot)
		}
	}
	switch {
	case deleting:
		sum.Phase = PhaseTerminating
	case sum.Ready == 0:
		sum.Phase = PhasePending
	case sum.Ready < s.ReplicationFactor:
		sum.Phase = PhaseDegraded
	default:
		sum.Phase = PhaseAvailable
	}
	return sum
}

// LagOf says how far node's copy is behind the volume's newest snapshot
// (Summarize's Newest): the snapshot numbers between them, and whether it
// holds that newest snapshot itself. A copy of another epoch than the
// newest does not hold it, even at the same number (its snapshot may have
// diverged), and is at least one behind; a copy on a fenced branch is
// behind from where the volume's history left it (Forked.At). A node
// without an entry holds nothing.
func LagOf(s State, node Node) (behind SnapshotNumber, holdsNewest bool) {
	newest, ok := s.NewestReplica()
	if !ok {
		return 0, false
	}
	n := newest.Holds()
	self, _ := s.Replica(node)
	if self.OnFencedBranch() {
		// Its newest snapshot is of the branch the volume left: it shares
		// the volume's line up to the fork only.
		return n.Number - min(n.Number-1, self.Forked.At.Number), false
	}
	if self.Snapshot == n.Number && self.SnapshotEpoch == n.Epoch && n.Number != 0 {
		return 0, true
	}
	if self.Snapshot >= n.Number {
		return 1, false
	}
	return n.Number - self.Snapshot, false
}
