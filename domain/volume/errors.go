package volume

import (
	"errors"
	"fmt"
)

// ErrOutOfRange reports a capacity the driver cannot provide: below the
// minimum, above the maximum, or a range that rounding cannot satisfy.
var ErrOutOfRange = errors.New("capacity out of range")

// InvalidError reports a request field that is malformed or not allowed.
// It is the caller's mistake: retrying the same request cannot succeed.
type InvalidError struct {
	Field  string // the request field or parameter key, e.g. "name", "parameters.compression"
	Value  string // the offending value, truncated for logs
	Reason string // why it was refused, in words an operator can act on
}

func (e *InvalidError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Reason)
}

func invalid(field, value, reason string) error {
	return &InvalidError{Field: field, Value: truncate(value), Reason: reason}
}

// truncate keeps hostile input (10 KB names) out of logs and error strings.
func truncate(s string) string { return truncateTo(s, 64) }

// truncateTo is truncate with another bound (a kubelet path is longer than
// a name).
func truncateTo(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max] + fmt.Sprintf("...(%d bytes)", len(s))
}
