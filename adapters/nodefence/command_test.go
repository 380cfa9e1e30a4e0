package nodefence

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fence")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheCommandFencesTheNodeItIsGivenAndReportsWhyNot(t *testing.T) {
	dir := t.TempDir()
	ok := Command{Path: script(t, `echo "$1" > `+dir+`/fenced`)}
	if err := ok.FenceNode(context.Background(), "node-2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "fenced")); strings.TrimSpace(string(got)) != "node-2" {
		t.Fatalf("the command was given %q, want node-2", got)
	}
	bad := Command{Path: script(t, `echo "no power switch answers" >&2; exit 3`)}
	err := bad.FenceNode(context.Background(), "node-2")
	if err == nil || !strings.Contains(err.Error(), "exited 3") || !strings.Contains(err.Error(), "no power switch answers") {
		t.Fatalf("a failed fence answered %v", err)
	}
	if err := ok.FenceNode(context.Background(), "-rf"); err == nil {
		t.Fatal("a node name that reads as an option was passed to the command")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (Command{Path: script(t, "sleep 10")}).FenceNode(ctx, "node-2"); err == nil {
		t.Fatal("a fence whose context ended succeeded")
	}
}
