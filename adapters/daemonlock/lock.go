// Package daemonlock makes one Ferry daemon at a time do a node's duties
// (its CSI sockets, its Lease, its guard and survivor, its peer service,
// its placement): during a rolling update with a surge (the node
// DaemonSet's maxSurge), the new daemon's pod starts while the old one
// still runs, its image pulled however long that takes, and waits here
// until the old daemon has stopped: the node is without a daemon only
// for the old one's stop and the new one's start, never for a pull.
//
// Two things say a daemon still runs: the lock file, which a daemon holds
// (flock) for as long as its process lives, and the CSI socket, which a
// daemon of an earlier version (without the lock) serves until it stops.
package daemonlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Lock is a held node lock.
type Lock struct {
	f *os.File
	// contended: another daemon held the node when Acquire began (the
	// lock, or an earlier daemon's socket answering).
	contended bool
}

// Contended reports whether another daemon held the node when Acquire
// began: in a surge the new daemon starts while the old one still runs,
// so a new daemon that finds the node free was started after the old
// one had already stopped (the node was without a daemon meanwhile).
func (l *Lock) Contended() bool { return l != nil && l.contended }

// Release gives the lock up (the process's exit does too).
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Options say where the lock and the socket are, and how waiting reports.
type Options struct {
	// Path is the lock file (on a host directory every daemon of the
	// node mounts). Its directory is made if missing.
	Path string
	// Socket is the CSI socket the node's daemon serves ("": not
	// probed): while it answers, an earlier daemon still runs.
	Socket string
	// Poll is how often the lock and the socket are tried (0: 100 ms).
	Poll time.Duration
	// Waiting is called, about every ten seconds, while another daemon
	// holds the node (nil: not called).
	Waiting func(why string, since time.Duration)
}

// Acquire waits until no other daemon runs on the node, then holds the
// lock. It returns ctx's error if ctx ends first.
func Acquire(ctx context.Context, o Options) (*Lock, error) {
	if o.Path == "" {
		return nil, errors.New("daemonlock: no lock file")
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o700); err != nil {
		return nil, fmt.Errorf("daemonlock: %w", err)
	}
	f, err := os.OpenFile(o.Path, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemonlock: open %s: %w", o.Path, err)
	}
	poll := o.Poll
	if poll <= 0 {
		poll = 100 * time.Millisecond
	}
	start := time.Now()
	reported := start
	report := func(why string) {
		if o.Waiting != nil && time.Since(reported) >= 10*time.Second {
			reported = time.Now()
			o.Waiting(why, time.Since(start))
		}
	}
	held, contended := false, false
	for {
		if !held {
			switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
			case err == nil:
				held = true
			case errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR):
				contended = true
				report("another daemon of this node holds " + o.Path)
			default:
				f.Close()
				return nil, fmt.Errorf("daemonlock: lock %s: %w", o.Path, err)
			}
		}
		if held {
			if !answers(o.Socket) {
				return &Lock{f: f, contended: contended}, nil
			}
			contended = true
			report("a daemon without the lock still serves " + o.Socket)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// answers reports whether a process accepts connections on the unix
// socket path (a stale file of a stopped one refuses them).
func answers(path string) bool {
	if path == "" {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
