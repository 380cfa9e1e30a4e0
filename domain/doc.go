// Package domain is Ferry's pure core. Its subpackages hold the rules of the
// system as data and functions: what a request may say, how big a volume
// is, when it may be deleted or must be remounted (volume); a replicated
// volume's shared state, its changes, and every decision of one replica,
// the replica machine (replica); what Kubernetes is told to run and where
// (placement); when a node may write, when it is lost, who takes its
// volumes over and what follows (liveness).
//
// Nothing under domain performs I/O, reads the clock, draws random numbers or
// logs: time and outcomes arrive as values, decisions leave as values, and the
// adapters carry them out. `go list -deps ./domain/...` must show only the
// standard library; the Makefile's `lint-layers` target checks it.
package domain
