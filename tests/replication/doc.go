// Package replication holds the end-to-end tests of the replication data
// plane (make test-replication): three simulated nodes on one machine, each
// a ZFS pool on a sparse file (ferry-a, ferry-b, ferry-c), three
// `ferry volume-manager` processes per volume talking mutual-TLS gRPC over
// 127.0.0.1, and the shared replica list in a directory all of them use.
// Every scenario checks file contents by checksum on every replica.
//
// The tests carry the build tag "replication": `go test ./...` does not
// build them, `make test-replication` (part of `make test`) runs them.
package replication
