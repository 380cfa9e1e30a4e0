package daemonlock

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// acquired runs Acquire in the background and returns its result channel.
func acquired(o Options) <-chan *Lock {
	ch := make(chan *Lock, 1)
	go func() {
		l, err := Acquire(context.Background(), o)
		if err != nil {
			close(ch)
			return
		}
		ch <- l
	}()
	return ch
}

func waiting(t *testing.T, ch <-chan *Lock, what string) {
	t.Helper()
	select {
	case l := <-ch:
		t.Fatalf("acquired while %s (%v)", what, l)
	case <-time.After(300 * time.Millisecond):
	}
}

func got(t *testing.T, ch <-chan *Lock) *Lock {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("Acquire failed")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("not acquired once the node was free")
	}
	return nil
}

// The new daemon waits while the old one holds the lock, and takes it the
// moment the old one lets go.
func TestASecondDaemonWaitsForTheFirstToStop(t *testing.T) {
	o := Options{Path: filepath.Join(t.TempDir(), "run", "daemon.lock"), Poll: 10 * time.Millisecond}
	old := got(t, acquired(o))
	if old.Contended() {
		t.Error("the first daemon found the node held")
	}
	next := acquired(o)
	waiting(t, next, "the old daemon holds the lock")
	if err := old.Release(); err != nil {
		t.Fatal(err)
	}
	l := got(t, next)
	defer l.Release()
	if !l.Contended() {
		t.Error("the new daemon, which waited for the old one, says it found the node free")
	}
}

// A daemon of an earlier version holds no lock, but serves the CSI socket
// until it stops: the new one waits for that too. A stale socket file (no
// one listening) does not hold it back.
func TestADaemonWithoutTheLockIsWaitedForByItsSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false) // a stale file stays
	o := Options{Path: filepath.Join(dir, "daemon.lock"), Socket: sock, Poll: 10 * time.Millisecond}
	next := acquired(o)
	waiting(t, next, "an earlier daemon serves the CSI socket")
	l.Close()
	lock := got(t, next)
	defer lock.Release()
	if !lock.Contended() {
		t.Error("the new daemon, which waited for the earlier one's socket, says it found the node free")
	}
	again := got(t, acquired(Options{Path: filepath.Join(dir, "other.lock"), Socket: sock}))
	defer again.Release()
	if again.Contended() {
		t.Error("a stale socket file counted as a daemon holding the node")
	}
}

func TestWaitingEndsWithTheContext(t *testing.T) {
	o := Options{Path: filepath.Join(t.TempDir(), "daemon.lock"), Poll: 10 * time.Millisecond}
	held := got(t, acquired(o))
	defer held.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, o); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while held, ctx ended: %v", err)
	}
}
