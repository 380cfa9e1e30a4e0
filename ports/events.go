package ports

import (
	"context"

	"github.com/ferry-csi/ferry/domain/volume"
)

// EventRecorder raises events an operator should see next to the volume
// (Kubernetes Events on its ReplicatedVolume and claim; log lines always).
type EventRecorder interface {
	// Record raises an event; it never fails the caller (recording is best
	// effort, the log line is the record of last resort).
	Record(ctx context.Context, id volume.ID, e Event)
}

// Event is one event. Type is "Normal" or "Warning"; Reason is a short
// CamelCase word ("Diverged", "RolledBack"); Message says what and why.
type Event struct {
	Type, Reason, Message string
}

// Event types.
const (
	EventNormal  = "Normal"
	EventWarning = "Warning"
)
