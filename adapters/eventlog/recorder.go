// Package eventlog records Ferry's events as structured log lines: the
// EventRecorder outside Kubernetes, and the record of last resort under
// adapters/kube/events, which logs every event here before raising it as
// a Kubernetes Event.
package eventlog

import (
	"context"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Recorder logs each event with its type and reason.
type Recorder struct{ Log *zap.Logger }

var _ ports.EventRecorder = Recorder{}

// Record logs e: warnings at warn level, the rest at info.
func (r Recorder) Record(_ context.Context, id volume.ID, e ports.Event) {
	fields := []zap.Field{zap.String("volume", string(id)), zap.String("type", e.Type), zap.String("reason", e.Reason), zap.String("message", e.Message)}
	if e.Type == ports.EventWarning {
		r.Log.Warn("event", fields...)
		return
	}
	r.Log.Info("event", fields...)
}
