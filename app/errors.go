package app

import "errors"

// Errors the use cases add to those of the domain (volume.InvalidError,
// volume.ErrOutOfRange) and of the ports (ports.ErrNotFound, ...).
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
	// (block volumes, multi-node access).
	ErrUnsupported = errors.New("unsupported")
)
