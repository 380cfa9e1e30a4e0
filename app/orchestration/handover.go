package orchestration

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/ports"
)

// HandoverConfig configures HandOver.
type HandoverConfig struct {
	// Poll is how often the next daemon is read (0: 500 ms).
	Poll time.Duration
	// Margin is what the daemon needs to stop before its pod's grace
	// period ends (liveness.HandoverInput.Margin).
	Margin time.Duration
	// Unread is how long an unreadable next daemon is tried for.
	Unread time.Duration
}

// HandOver is a stopping daemon's last duty: it returns once the daemon
// may stop (liveness.Handover), keeping the node meanwhile while the pod
// that replaces it has not started its daemon. ctx ending (a second
// signal) ends the wait at once.
func HandOver(ctx context.Context, cfg HandoverConfig, next ports.NextDaemons, now func() time.Time, log *zap.Logger) {
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	since := now()
	said := ""
	for {
		read, err := next.NextDaemon(ctx)
		v := liveness.Handover(liveness.HandoverInput{Read: err == nil, Next: read, Now: now(), Since: since, Margin: cfg.Margin, Unread: cfg.Unread})
		if v.Reason != said {
			said = v.Reason
			if v.Hold {
				log.Warn("stopping: this daemon keeps the node until the next one has started", zap.String("reason", v.Reason), zap.Error(err))
			} else {
				log.Info("stopping: the node handed over", zap.String("reason", v.Reason), zap.Duration("held", now().Sub(since)), zap.Error(err))
			}
		}
		if !v.Hold {
			return
		}
		select {
		case <-ctx.Done():
			log.Warn("stopping: the wait for the next daemon was cut short (a second signal)", zap.Duration("held", now().Sub(since)))
			return
		case <-time.After(cfg.Poll):
		}
	}
}
