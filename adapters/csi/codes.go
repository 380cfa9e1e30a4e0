package csi

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// toStatus maps an error from the use cases to the CSI spec's gRPC code.
// The order matters: the most specific meaning wins (a foreign dataset is a
// precondition failure even though the store also says it exists).
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var inv *volume.InvalidError
	code := codes.Internal
	switch {
	case errors.Is(err, ports.ErrKeyRejected), errors.Is(err, volume.ErrNotFerrysKey), errors.Is(err, ports.ErrRawUnsupported):
		// A wrong key for an encrypted volume, or encryption Ferry does
		// not manage: nothing changed; not until the Secret (or the
		// dataset) does.
		code = codes.FailedPrecondition
	case errors.As(err, &inv), errors.Is(err, ports.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, refusal.ErrUnsupported):
		code = codes.InvalidArgument
	case errors.Is(err, refusal.ErrPending), errors.Is(err, ports.ErrNotPrimary):
		// Another call is in progress, or another replica is the primary
		// (a rolling update overlaps two pods): the kubelet retries.
		code = codes.Aborted
	case errors.Is(err, provision.ErrInvalidToken):
		code = codes.Aborted
	case errors.Is(err, ports.ErrConflict):
		// A compare-and-swap lost to a concurrent writer: the caller retries.
		code = codes.Aborted
	case errors.Is(err, ports.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, replica.ErrFenced), errors.Is(err, replica.ErrPrimaryActive),
		errors.Is(err, replica.ErrUnsafe), errors.Is(err, replica.ErrBehind):
		// The replicas' state forbids the call now (another primary, too few
		// copies, not caught up); it may be allowed once that state changes.
		code = codes.FailedPrecondition
	case errors.Is(err, refusal.ErrPrecondition), errors.Is(err, ports.ErrNotOwned):
		code = codes.FailedPrecondition
	case errors.Is(err, refusal.ErrIncompatible), errors.Is(err, ports.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, volume.ErrOutOfRange):
		code = codes.OutOfRange
	case errors.Is(err, ports.ErrNoSpace):
		code = codes.ResourceExhausted
	case errors.Is(err, ports.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, ports.ErrBusy):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}

func required(field string) error {
	return status.Error(codes.InvalidArgument, field+" is required")
}
