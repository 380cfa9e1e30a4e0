package zfs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
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
