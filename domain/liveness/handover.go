package liveness

import (
	"fmt"
	"time"
)

// The handover of a node's duties from a stopping daemon to the next. A
// rolling update with a surge starts the new daemon pod next to the old
// one and deletes the old one once the new one runs: the new daemon waits
// on the node lock, so the node is without a daemon only for the old
// one's stop. But the DaemonSet deletes an old pod that is unready at
// once, as soon as its successor exists: a sidecar of it restarting, for
// one moment, is enough, and the successor may still be pulling its image
// for minutes. A daemon that stopped then would leave its node without a
// Lease and a guard for the whole pull: the volume managers' watchdogs
// fence its primaries, the other nodes take them over. So a daemon told
// to stop while the pod that replaces it has not started its daemon keeps
// the node's duties until it has (its SIGTERM holds), or until its own
// grace period is about to end; with no successor (an uninstall, a node
// removed) it stops once none has been found for a moment.

// NextDaemon is what a stopping daemon read of its own pod and of the pod
// that replaces it on its node.
type NextDaemon struct {
	// Gone: the own pod, its DaemonSet or this daemon's rights to read
	// them are gone (a forced deletion, an uninstall): nothing to wait for.
	Gone bool
	// Deleting: the daemon's own pod is being deleted (a DaemonSet
	// replacing it always deletes it first; a SIGTERM without that, a
	// node shutting down, a kill, hands nothing over).
	Deleting bool
	// Grace: the own pod's deletion grace period (0: none, stop now).
	Grace time.Duration
	// Found: another pod of the daemon's own DaemonSet for its node (bound
	// to it, or not scheduled yet but meant for it), not being deleted and
	// not ended.
	Found bool
	Pod   string
	// Running: that pod's daemon container has started (it waits for the
	// node lock, which this daemon's exit frees).
	Running bool
}

// HandoverInput is what a stopping daemon knows when it looks.
type HandoverInput struct {
	// Next is the last read of the pods, at ReadAt (zero: none yet).
	Next   NextDaemon
	ReadAt time.Time
	Now    time.Time
	// Since: when the stop was asked (the SIGTERM), on the same clock.
	Since time.Time
	// Margin: what the daemon needs to stop cleanly before its grace ends.
	Margin time.Duration
	// Unread: how old the last read may be (or, with none, how long a
	// stop waits for the first).
	Unread time.Duration
	// FoundAt: when a read last found the next pod (zero: never);
	// Absent: how long no pod must be found before the stop (a pod
	// deleted by hand is read before its controller made the next one; a
	// successor failing is deleted and made again).
	FoundAt time.Time
	Absent  time.Duration
}

// HandoverVerdict says whether the daemon keeps the node for now.
type HandoverVerdict struct {
	Hold   bool
	Reason string
}

// Handover is the rule (see above). The grace period counts from the
// SIGTERM on the daemon's own clock, never the API server's.
func Handover(in HandoverInput) HandoverVerdict {
	s := in.Next
	switch {
	case in.ReadAt.IsZero() && in.Now.Sub(in.Since) < in.Unread:
		return HandoverVerdict{Hold: true, Reason: "the node's daemon pods cannot be read yet: looking again before stopping"}
	case in.ReadAt.IsZero() || in.Now.Sub(in.ReadAt) >= in.Unread:
		return HandoverVerdict{Reason: fmt.Sprintf("the node's daemon pods could not be read for %s: stopping without knowing of a successor", in.Unread)}
	case s.Gone:
		return HandoverVerdict{Reason: "this daemon's pod, its DaemonSet or its rights to read them are gone (a forced deletion, an uninstall): nothing to hand the node over to"}
	case !s.Deleting:
		return HandoverVerdict{Reason: "this daemon's pod is not being deleted (a node shutting down, a process killed): nothing replaces it"}
	case !in.Now.Before(in.Since.Add(s.Grace - in.Margin)):
		return HandoverVerdict{Reason: fmt.Sprintf("this pod's grace period (%s) ends: stopping whatever replaces it (the node is without a daemon until its next one starts)", s.Grace)}
	case !s.Found && in.Now.Sub(later(in.Since, in.FoundAt)) < in.Absent:
		return HandoverVerdict{Hold: true, Reason: "no other daemon pod for this node yet: looking again before stopping (its controller may be making it)"}
	case !s.Found:
		return HandoverVerdict{Reason: "no other daemon pod for this node (an uninstall, a node drained or removed): nothing to hand the node over to"}
	case s.Running:
		return HandoverVerdict{Reason: fmt.Sprintf("the next daemon (pod %s) has started and waits for the node", s.Pod)}
	}
	return HandoverVerdict{Hold: true, Reason: fmt.Sprintf("the next daemon's pod %s has not started its daemon yet (scheduled, its image pulled, its init containers): this daemon keeps the node's lease, guard and services until it does", s.Pod)}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
