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
	// ReadTimeout bounds one read (0: 3 s): an API server that does not
	// answer must not hold the stop past the checks below.
	ReadTimeout time.Duration
	// Margin is what the daemon needs to stop before its pod's grace
	// period ends (liveness.HandoverInput.Margin).
	Margin time.Duration
	// Unread is how old the last read may be (liveness.HandoverInput.Unread;
	// 0: 10 s).
	Unread time.Duration
	// Absent is how long no next pod must be found before the stop
	// (liveness.HandoverInput.Absent; 0: 2 s).
	Absent time.Duration
}

// HandOver is a stopping daemon's last duty: it returns once the daemon
// may stop (liveness.Handover), keeping the node meanwhile while the pod
// that replaces it has not started its daemon. since is when the stop was
// asked (the signal's arrival, on now's clock: the grace period counts
// from it). ctx ending (a second signal) ends the wait at once.
func HandOver(ctx context.Context, cfg HandoverConfig, next ports.NextDaemons, since time.Time, now func() time.Time, log *zap.Logger) {
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 3 * time.Second
	}
	if cfg.Unread <= 0 {
		cfg.Unread = 10 * time.Second
	}
	if cfg.Absent <= 0 {
		cfg.Absent = 2 * time.Second
	}
	in := liveness.HandoverInput{Since: since, Margin: cfg.Margin, Unread: cfg.Unread, Absent: cfg.Absent}
	said := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, cfg.ReadTimeout)
		read, err := next.NextDaemon(rctx)
		cancel()
		in.Now = now()
		if err == nil {
			in.Next, in.ReadAt = read, in.Now
			if read.Found {
				in.FoundAt = in.Now
			}
		}
		v := liveness.Handover(in)
		if v.Reason != said {
			said = v.Reason
			if v.Hold {
				log.Warn("stopping: this daemon keeps the node until the next one has started", zap.String("reason", v.Reason), zap.Error(err))
			} else {
				log.Info("stopping: the node handed over", zap.String("reason", v.Reason), zap.Duration("held", in.Now.Sub(in.Since)), zap.Error(err))
			}
		}
		if !v.Hold {
			return
		}
		select {
		case <-ctx.Done():
			log.Warn("stopping: the wait for the next daemon was cut short (a second signal)", zap.Duration("held", now().Sub(in.Since)))
			return
		case <-time.After(cfg.Poll):
		}
	}
}
