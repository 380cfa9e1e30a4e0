// Package filecluster is a ports.ClusterState kept in a directory, so that
// several processes on one machine share it: the multi-process replication
// tests (tests/replication) run one Ferry node per process against it; on
// Kubernetes the shared state is adapters/kube/rvstate. It is not meant for
// production: nothing in it spans machines, and it trusts every process
// that can write the directory.
//
// Each volume has up to three files in the directory:
//
//   - <volume>.json holds the state as {"version": <uint64>, "state":
//     <replica.State as JSON>}. It is replaced atomically (written to a
//     temporary file in the same directory, synced, renamed over it), so
//     Get reads it without any lock and always sees one whole write.
//   - <volume>.lock is only ever locked (flock, exclusive) by writers, for
//     the short moment of a compare-and-swap. It is never removed: a
//     process blocked on a removed lock file would hold a lock no one else
//     sees.
//   - <volume>.seq records the version of the last deleted state, so that a
//     state deleted and created again never reuses a version, as a
//     resourceVersion would not.
//
// Versions count writes per volume (the port only compares them). Update
// keeps the Kubernetes adapter's concurrency contract as fakecluster does:
// it reads the state and its version, runs fn on a copy without holding any
// lock, then takes the volume's lock and writes only if the version is
// still the one it read, retrying a bounded number of times. Temporary
// files start with a dot, and volume IDs may not, so they never collide.
package filecluster
