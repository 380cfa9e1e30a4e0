// Package replication is a replica's volume manager (Replicator): it feeds
// the replica machine (domain/replica) what it observes in the node's store
// and in the volume's shared state, and carries out the machine's actions:
// reports, snapshots, transfers from peers (paced by a token bucket, their
// progress tracked), rollbacks, retention and the safe-deletion protocol
// (LeaveHere runs the last one without a volume manager). It serves the
// node's publish and unpublish hand-overs (Acquire, Release) and, with the
// node's daemon down, fences its primary on its own (Watchdog, on the
// verdicts of domain/liveness that the daemon publishes as a permit).
package replication
