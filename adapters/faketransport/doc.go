// Package faketransport is an in-memory ports.Transport: a simulated network
// that routes each Fetch to the SnapshotStore registered for the node, so
// that tests run replication between several in-memory stores (memstore)
// in one process. Nodes can be cut off and healed to simulate a partition.
package faketransport
