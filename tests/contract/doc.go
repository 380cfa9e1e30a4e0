// Package contract holds the contract suites that every implementation of a
// port must pass: the ZFS adapter and the in-memory fake of SnapshotStore
// run the same cases, so that tests written against the fake say something
// true about ZFS.
package contract
