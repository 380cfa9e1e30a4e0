package placement

import (
	"fmt"
	"slices"

	"github.com/ferry-csi/ferry/domain/replica"
)

// Rolling the volume managers to a new version. A replica pod is renewed
// in place (its container restarted on the new image: the pod, its node
// and its copy stay), one pod of a volume at a time, each only once every
// other pod of the volume is ready again, so that at most one copy of a
// volume ever pauses, and never while another is catching up. The
// secondaries go first and the active primary's pod last: its volume
// manager snapshots the volume the others replicate.

// RollPod is a replica pod of a volume as the roll sees it.
type RollPod struct {
	Name    string
	Node    replica.Node
	Primary bool // outside the ReplicaSet: the active primary's
	// Current says its volume manager runs the version being rolled to.
	Current bool
	// Ready is the pod's readiness (its volume manager answers, its copy
	// replicating); Terminating a pod being deleted (not rolled, and not
	// waited for: its ReplicaSet replaces it on the current template).
	Ready, Terminating bool
	// Restarting says it was renewed and its container does not run the
	// new version yet (the old one still stopping): the roll waits for
	// it as for a pod not ready.
	Restarting bool
}

// Roll is the roll's next step for a volume: the pod to renew ("": none
// now), and why.
type Roll struct {
	Pod    string
	Reason string
}

// NextRoll picks the next pod of a volume to renew.
func NextRoll(pods []RollPod) Roll {
	live := slices.DeleteFunc(slices.Clone(pods), func(p RollPod) bool { return p.Terminating })
	slices.SortFunc(live, func(a, b RollPod) int {
		switch {
		case a.Primary != b.Primary:
			if a.Primary {
				return 1
			}
			return -1
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	var next *RollPod
	for i, p := range live {
		if p.Restarting {
			return Roll{Reason: fmt.Sprintf("%s on %s is restarting on the new version: one pod at a time", p.Name, p.Node)}
		}
		if !p.Ready {
			return Roll{Reason: fmt.Sprintf("%s on %s is not ready: one pod at a time", p.Name, p.Node)}
		}
		if !p.Current && next == nil {
			next = &live[i]
		}
	}
	if next == nil {
		return Roll{Reason: "every replica pod runs the current version"}
	}
	what := "a secondary's"
	if next.Primary {
		what = "the active primary's, last"
	}
	return Roll{Pod: next.Name, Reason: fmt.Sprintf("every pod ready; %s on %s (%s) runs an earlier version", next.Name, next.Node, what)}
}

// Roller is the daemon that rolls a volume's pods: its primary's (the
// sizer of its workload), or with no primary its first listed copy's, so
// that one daemon rolls each volume.
func Roller(s replica.State) replica.Node {
	if s.Primary != "" {
		return s.Primary
	}
	if len(s.Replicas) > 0 {
		return s.Replicas[0].Node
	}
	return ""
}
