// Package refusal names why a use case refuses a call it may well see
// again: another operation on the same object in progress, a retry that
// asks for something else than the first call, a state that forbids the
// call, a request Ferry does not serve. They add to the errors of the
// domain (volume.InvalidError, volume.ErrOutOfRange) and of the ports
// (ports.ErrNotFound, ...); the CSI adapter maps each to its gRPC code in
// one place (adapters/csi/codes.go).
package refusal

import (
	"errors"

	"github.com/ferry-csi/ferry/domain/volume"
)

var (
	// ErrIncompatible: an object of that name exists with other attributes
	// (size, parameters, source); the request is not a retry of the first.
	ErrIncompatible = errors.New("exists with incompatible attributes")
	// ErrPending: another operation on the same volume or snapshot is in
	// progress; the caller should retry later.
	ErrPending = errors.New("an operation on this object is already in progress")
	// ErrPrecondition: the object is not in a state that allows the call
	// (a volume with snapshots, a volume still mounted, a foreign dataset).
	ErrPrecondition = errors.New("failed precondition")
	// ErrUnsupported: the request asks for something Ferry does not do
	// (block volumes, multi-node access): the domain's own
	// (volume.ParseCreate refuses with it).
	ErrUnsupported = volume.ErrUnsupported
)
