// Package zfstest makes throw-away ZFS pools on sparse files for tests that
// need real ZFS (zfs-fuse here, OpenZFS elsewhere).
//
// A test may skip only when the zfs tools are truly absent from the machine;
// under CI (CI set in the environment) a missing tool fails the test, so CI
// can never pass by skipping.
package zfstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Dir holds the pools' backing files and mount points.
const Dir = "/var/tmp/ferry-test"

// Require fails or skips t when ZFS cannot be used here.
func Require(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"zfs", "zpool"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed, and CI must run the real-ZFS tests: %v", tool, err)
			}
			t.Skipf("%s is not installed: skipping a real-ZFS test (CI installs zfs-fuse)", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatalf("real-ZFS tests need root")
	}
	if err := serialize(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "zpool", "list", "-H", "-o", "name").CombinedOutput(); err != nil {
		t.Fatalf("zfs is installed but not usable (is the zfs-fuse daemon running, and answering? `make zfs-up` starts it, or starts a wedged one again): %v: %s", err, out)
	}
}

var (
	lockOnce sync.Once
	lockErr  error
)

// serialize makes this test process the only one using ZFS until it
// exits: `go test ./...` runs packages in parallel, and zfs-fuse, shared
// by all of them, has wedged under several processes creating,
// exporting and destroying pools at once. The lock is an flock on
// Dir/.lock, released by the kernel when the process ends however it
// ends.
func serialize() error {
	lockOnce.Do(func() {
		if err := os.MkdirAll(Dir, 0o755); err != nil {
			lockErr = err
			return
		}
		f, err := os.OpenFile(filepath.Join(Dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			lockErr = err
			return
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			f.Close()
			lockErr = fmt.Errorf("zfstest: lock %s: %w", f.Name(), err)
			return
		}
		held = f // never closed: the lock lasts as long as the process
	})
	return lockErr
}

var held *os.File

// Pool is a pool on a sparse file, destroyed when the test ends.
type Pool struct {
	Name string
	File string
}

// NewPool creates a pool named prefix-<random> of size (e.g. "1G").
func NewPool(t testing.TB, prefix, size string) *Pool {
	t.Helper()
	Require(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	p, err := CreatePool(name, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Destroy(); err != nil {
			t.Errorf("destroy pool %s: %v", name, err)
		}
	})
	return p
}

// CreatePool creates a pool on Dir/<name>.img, mounted under Dir/mnt/<name>.
func CreatePool(name, size string) (*Pool, error) {
	if err := os.MkdirAll(filepath.Join(Dir, "mnt"), 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(Dir, name+".img")
	if out, err := exec.Command("truncate", "-s", size, file).CombinedOutput(); err != nil {
		return nil, &cmdError{"truncate", err, out}
	}
	if out, err := exec.Command("zpool", "create", "-f", "-m", filepath.Join(Dir, "mnt", name), name, file).CombinedOutput(); err != nil {
		_ = os.Remove(file)
		return nil, &cmdError{"zpool create " + name, err, out}
	}
	return &Pool{Name: name, File: file}, nil
}

// Destroy destroys the pool and removes its file. zfs-fuse answers "pool
// is busy" for a moment after the last dataset was unmounted or its user
// exited, so busy is retried for up to ten seconds.
func (p *Pool) Destroy() error {
	var last error
	for i := 0; i < 50; i++ {
		out, err := exec.Command("zpool", "destroy", "-f", p.Name).CombinedOutput()
		if err == nil {
			_ = os.Remove(filepath.Join(Dir, "mnt", p.Name))
			return os.Remove(p.File)
		}
		last = &cmdError{"zpool destroy " + p.Name, err, out}
		if !strings.Contains(string(out), "busy") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	return last
}

// ZFS runs a zfs command for a test's setup and fails the test on error.
func ZFS(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("zfs", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

type cmdError struct {
	what string
	err  error
	out  []byte
}

func (e *cmdError) Error() string {
	return e.what + ": " + e.err.Error() + ": " + strings.TrimSpace(string(e.out))
}
