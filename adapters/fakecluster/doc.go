// Package fakecluster is an in-memory ports.ClusterState for tests and the
// demo's dry runs: the shared replica state that, in a cluster, lives in a
// custom resource.
//
// It keeps the Kubernetes adapter's concurrency contract for real rather
// than serialising callers behind a lock: Update reads a copy and its
// version, runs fn without holding any lock, and writes only if the stored
// version is still the one it read (a compare-and-swap, as a resourceVersion
// precondition does), retrying a bounded number of times. Tests written
// against the fake therefore see the same interleavings, re-runs of fn and
// ErrConflict answers as against the API server. The contract suite in
// tests/contract checks both.
package fakecluster
