package zfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// No more than the runner's slots of short commands run at once: a stand-in
// zfs records how many of its invocations overlap.
func TestTheRunnerBoundsConcurrentCommands(t *testing.T) {
	dir := t.TempDir()
	running, seen := filepath.Join(dir, "running"), filepath.Join(dir, "seen")
	if err := os.Mkdir(running, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "zfs")
	body := "#!/bin/sh\nmkdir " + running + "/$$\nls " + running + " | wc -l >> " + seen + "\nsleep 0.05\nrmdir " + running + "/$$\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runner{zfsBin: script, slots: make(chan struct{}, 2)}
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.zfs(context.Background(), "list"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) != 12 {
		t.Fatalf("%d invocations recorded, want 12", len(lines))
	}
	for _, l := range lines {
		if n, _ := strconv.Atoi(l); n > 2 {
			t.Fatalf("%d commands ran at once with 2 slots (%v)", n, lines)
		}
	}
}

// Every command is told to the observer when it ends: its tool, its
// subcommand and its error; a stream when read to its end or closed.
func TestTheObserverHearsEveryCommandAndStream(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "zfs")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = fail ] && exit 1\necho out\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		tool, sub string
		failed    bool
	}
	var mu sync.Mutex
	var got []seen
	r := runner{zfsBin: script, zpoolBin: script, observe: func(tool, sub string, _ time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, seen{tool, sub, err != nil})
	}}
	ctx := context.Background()
	if _, err := r.zfs(ctx, "list", "-H"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.zfs(ctx, "fail"); err == nil {
		t.Fatal("a failing command succeeded")
	}
	s, err := r.stream(ctx, "send", "tank/v@s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(s); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	// What go-zfs runs itself is told as well.
	_ = r.goZFS("destroy", func() error { return nil })
	_ = r.goZFS("set", func() error { return errors.New("cannot set property") })
	want := []seen{{"zfs", "list", false}, {"zfs", "fail", true}, {"zfs", "send", false}, {"zfs", "destroy", false}, {"zfs", "set", true}}
	if !slices.Equal(got, want) {
		t.Errorf("observed %v, want %v", got, want)
	}
}

// A command that does not end when killed (its caller gave up) does not
// hold its caller for ever: after killWait the caller gets ErrStuck. Until
// it exits, no other command starts (each would queue behind it in the
// same pool, or run out of order with it); once it exited, commands run
// again. A stand-in zfs leaves a child holding its output open, as a
// process stuck in the kernel holds its caller's wait.
func TestAKilledCommandThatDoesNotEndReleasesItsCaller(t *testing.T) {
	defer func(d time.Duration) { killWait = d }(killWait)
	killWait = 300 * time.Millisecond
	dir := t.TempDir()
	script, ready, ran := filepath.Join(dir, "zfs"), filepath.Join(dir, "ready"), filepath.Join(dir, "ran")
	// The child holds stdout for 2 s; the parent says it is ready only
	// once the child runs, then waits to be killed.
	body := "#!/bin/sh\nif [ \"$1\" = create ]; then sleep 2 & touch " + ready + "; exec sleep 30; fi\ntouch " + ran + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runner{zfsBin: script, slots: make(chan struct{}, 2), stuck: &stuckCommands{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.zfs(ctx, "create", "pool/v")
		done <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in never started")
		}
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStuck) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want ErrStuck and the cancellation", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the caller is still held 20 s after its context ended")
	}
	// While it has not exited, nothing else starts on its dataset (a
	// snapshot of it included); a command on another dataset runs.
	for _, args := range [][]string{{"create", "pool/v"}, {"snapshot", "pool/v@s1"}, {"set", "readonly=on", "pool/v"}} {
		if _, err := r.zfs(context.Background(), args...); !errors.Is(err, ErrStuck) {
			t.Fatalf("%v while a command on pool/v is stuck: %v, want ErrStuck", args, err)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("a command on pool/v ran while another was stuck")
	}
	if _, err := r.zfs(context.Background(), "set", "readonly=on", "pool/w"); err != nil {
		t.Fatalf("a command on another dataset: %v", err)
	}
	if _, err := r.zfs(context.Background(), "get", "mountpoint", "pool/v"); err != nil {
		t.Fatalf("a read of the stuck dataset (a fence's lookup): %v", err)
	}
	_ = os.Remove(ran)
	// Once it exited (the child's 2 s), commands on it run again.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := r.zfs(context.Background(), "get", "type", "pool/v")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrStuck) || time.Now().After(deadline) {
			t.Fatalf("after the stuck command exited: %v", err)
		}
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("the command after it did not run")
	}
}

// When killed commands that have not exited hold every slot, any command
// is refused at once rather than waiting for a slot that may never free.
func TestWhenEverySlotIsStuckCommandsAreRefusedAtOnce(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "zfs")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntrue\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st := &stuckCommands{}
	r := runner{zfsBin: script, slots: make(chan struct{}, 2), stuck: st}
	// Two stuck commands, as the runner records them, each holding a slot.
	for _, ds := range []string{"pool/a", "pool/b"} {
		r.slots <- struct{}{}
		st.add(script, []string{"create", ds})
	}
	if _, err := r.zfs(context.Background(), "get", "type", "pool/c"); !errors.Is(err, ErrStuck) {
		t.Fatalf("with every slot stuck: %v, want ErrStuck at once", err)
	}
	st.exited([]string{"create", "pool/a"})
	<-r.slots
	if _, err := r.zfs(context.Background(), "get", "type", "pool/c"); err != nil {
		t.Fatalf("with a slot free again: %v", err)
	}
}
