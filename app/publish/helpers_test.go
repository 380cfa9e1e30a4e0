package publish_test

import (
	"context"
	"sync"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// events records events for assertions.
type events struct {
	mu  sync.Mutex
	got []ports.Event
}

func (e *events) Record(_ context.Context, _ volume.ID, ev ports.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

func (e *events) reasons() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		out = append(out, ev.Reason)
	}
	return out
}

func (e *events) withReason(reason string) []ports.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []ports.Event
	for _, ev := range e.got {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// ackThenTakeover is a survivor's takeover of lost's volume by node,
// lost's guard having acknowledged every copy holding a snapshot as a
// taker before (the daemon does; the tests here run no daemon).
func ackThenTakeover(s *replica.State, node, lost replica.Node, lag uint64) error {
	if err := replica.Acknowledge(s, lost, s.Epoch, replica.Candidates(*s, lost)); err != nil {
		return err
	}
	return replica.Takeover(s, node, lost, lag)
}
