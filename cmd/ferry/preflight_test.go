package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A daemon whose node has no pool waits and says why, checking again and
// again, and a SIGTERM stops it cleanly: never a crash loop. The stand-in
// zfs answers as zfs does for a missing pool and counts its calls.
func TestADaemonWithoutItsPoolWaitsInsteadOfExiting(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	zfsBin := filepath.Join(dir, "zfs")
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\necho \"cannot open '$6': dataset does not exist\" >&2\nexit 1\n"
	if err := os.WriteFile(zfsBin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "daemon", "--node-id", "node-a", "--pool", "tank", "--zfs", zfsBin, "--zpool", zfsBin,
		"--csi-endpoint", "unix://"+filepath.Join(dir, "csi.sock"), "--kubelet-dir", dir, "--registration-dir", "none")
	cmd.Env = append(os.Environ(), "FERRY_TEST_AS_FERRY=1")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Progress: the daemon looks for the pool a second time (after its
	// first back-off), still running.
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(calls)
		if strings.Count(string(b), "\n") >= 2 {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the daemon exited (%v) instead of waiting for its pool:\n%s", err, stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon checked for its pool %q in 60 s, want twice:\n%s", b, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("a SIGTERM while waiting: %v, want a clean exit:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the daemon did not stop on SIGTERM while waiting:\n%s", stderr.String())
	}
	if log := stderr.String(); !strings.Contains(log, "waits for pool tank") || !strings.Contains(log, "dataset does not exist") {
		t.Errorf("the log does not say what the daemon waits for and why:\n%s", log)
	}
}
