package csi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferry-csi/ferry/app/provision"
	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Every typed error reaches a CSI caller with the code of ARCHITECTURE.md
// section 7, also when wrapped with detail as the use cases wrap them.
func TestEveryTypedErrorMapsToItsCSICode(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{&volume.InvalidError{Field: "name", Reason: "bad"}, codes.InvalidArgument},
		{ports.ErrInvalid, codes.InvalidArgument},
		{refusal.ErrUnsupported, codes.InvalidArgument},
		{ports.ErrNotFound, codes.NotFound},
		{refusal.ErrIncompatible, codes.AlreadyExists},
		{ports.ErrExists, codes.AlreadyExists},
		{volume.ErrOutOfRange, codes.OutOfRange},
		{ports.ErrNoSpace, codes.ResourceExhausted},
		{refusal.ErrPrecondition, codes.FailedPrecondition},
		{ports.ErrNotOwned, codes.FailedPrecondition},
		{ports.ErrBusy, codes.FailedPrecondition},
		{ports.ErrKeyRejected, codes.FailedPrecondition},
		{volume.ErrNotFerrysKey, codes.FailedPrecondition},
		{ports.ErrRawUnsupported, codes.FailedPrecondition},
		{refusal.ErrPending, codes.Aborted},
		{ports.ErrNotPrimary, codes.Aborted},
		{provision.ErrInvalidToken, codes.Aborted},
		{ports.ErrConflict, codes.Aborted},
		{ports.ErrUnavailable, codes.Unavailable},
		{replica.ErrFenced, codes.FailedPrecondition},
		{replica.ErrPrimaryActive, codes.FailedPrecondition},
		{replica.ErrUnsafe, codes.FailedPrecondition},
		{replica.ErrBehind, codes.FailedPrecondition},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("something else"), codes.Internal},
	}
	for _, c := range cases {
		t.Run(c.err.Error(), func(t *testing.T) {
			wrapped := fmt.Errorf("volume v: %w", c.err)
			if got := status.Code(toStatus(wrapped)); got != c.want {
				t.Fatalf("toStatus(%v) = %v, want %v", wrapped, got, c.want)
			}
		})
	}
	if toStatus(nil) != nil {
		t.Fatal("toStatus(nil) is not nil")
	}
	already := status.Error(codes.Unavailable, "as is")
	if got := toStatus(already); got != already {
		t.Fatalf("a status error was rewritten: %v", got)
	}
}
