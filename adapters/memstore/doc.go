// Package memstore is an in-memory ports.SnapshotStore (and
// ports.WriteLock) for tests and the demo's dry runs. A volume's files live in a real temporary directory (its
// MountPath), so tests write and read them exactly as on ZFS; snapshots copy
// the directory's files into memory, and streams carry those copies.
//
// It mirrors the ZFS adapter's contract, checked by the same suite
// (tests/contract): incremental receives need the target's newest snapshot
// to be the stream's base and the target to be unchanged since; GUIDs
// survive a transfer; capacity is reserved at creation.
package memstore
