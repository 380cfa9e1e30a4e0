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
// hold its caller for ever: after killWait the caller gets ErrStuck. A
// stand-in zfs leaves a child holding its output open, as a process stuck
// in the kernel holds its caller's wait.
func TestAKilledCommandThatDoesNotEndReleasesItsCaller(t *testing.T) {
	defer func(d time.Duration) { killWait = d }(killWait)
	killWait = 300 * time.Millisecond
	dir := t.TempDir()
	script := filepath.Join(dir, "zfs")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 5 &\nsleep 5\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runner{zfsBin: script, slots: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.zfs(ctx, "create", "pool/v")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStuck) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrStuck and the deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller is still held 10 s after its context ended")
	}
	// Its slot is free again: the next command runs.
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+ok+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := r.zfs(context.Background(), "list"); err != nil {
		t.Fatalf("the next command: %v", err)
	}
}
