//go:build cluster

package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// leaseWatch follows a node's lease through the API server's watch: when
// each new version of it arrived, as a survivor reading the leases sees
// them come (a survivor's read may see a version later, never sooner).
type leaseWatch struct {
	mu      sync.Mutex
	arrived []time.Time // each new resourceVersion's arrival, the first (the current one at the start) excluded
	last    string
	changed chan struct{}
	stop    context.CancelFunc
	done    chan struct{}
}

func watchLease(t *testing.T, name string) *leaseWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, kubectlBin, "--kubeconfig", kubeconfig, "-n", "ferry-system", "get", "lease", name,
		"--watch", "-o", `jsonpath={.metadata.resourceVersion}{"\n"}`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("watch the lease %s: %v", name, err)
	}
	l := &leaseWatch{changed: make(chan struct{}, 1), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			now := time.Now()
			rv := strings.TrimSpace(sc.Text())
			l.mu.Lock()
			if rv != "" && rv != l.last {
				if !first {
					l.arrived = append(l.arrived, now)
				}
				first, l.last = false, rv
				select {
				case l.changed <- struct{}{}:
				default:
				}
			}
			l.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the watch (it may be called again).
func (l *leaseWatch) Stop() {
	l.stop()
	<-l.done
}

// LastBefore is the arrival of the newest version that came before at
// (zero: none).
func (l *leaseWatch) LastBefore(at time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, a := range l.arrived {
		if a.Before(at) {
			last = a
		}
	}
	return last
}

// FirstAfter waits up to within for a version arriving after at, and
// returns when it arrived (zero: none came in time, or the watch ended).
func (l *leaseWatch) FirstAfter(at time.Time, within time.Duration) time.Time {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		for _, a := range l.arrived {
			if a.After(at) {
				l.mu.Unlock()
				return a
			}
		}
		l.mu.Unlock()
		select {
		case <-l.changed:
		case <-l.done:
			return time.Time{}
		case <-deadline.C:
			return time.Time{}
		}
	}
}
