// Package domain is Ferry's pure core. Its subpackages hold the rules of the
// system as data and functions: which names are acceptable (volume), how big
// a volume is (volume), which replica may delete its copy and which snapshot
// is the base of a transfer (replica).
//
// Nothing under domain performs I/O, reads the clock, draws random numbers or
// logs: time and outcomes arrive as values, decisions leave as values, and the
// adapters carry them out. `go list -deps ./domain/...` must show only the
// standard library; the Makefile's `lint-layers` target checks it.
package domain
