//go:build linux

package permitfile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

const s = time.Second

// node is a fake node: its clock and boot the test sets.
type node struct {
	clock atomic.Int64
	boot  atomic.Value
}

func newNode(at time.Duration, boot string) *node {
	n := &node{}
	n.clock.Store(int64(at))
	n.boot.Store(boot)
	return n
}

func (n *node) opts() Options {
	return Options{Clock: func() time.Duration { return time.Duration(n.clock.Load()) },
		BootID: func() (string, error) { return n.boot.Load().(string), nil }}
}

// The guard's instants (its process clock) come back as instants of the
// node's clock, Forever as Forever; the reader's now is the node's.
func TestAPermitReadsBackOnTheNodesClock(t *testing.T) {
	dir := t.TempDir()
	n := newNode(1000*s, "boot-1")
	w := New(dir, "a", n.opts())
	guardNow := func() time.Duration { return 10 * s } // the guard's clock reads 10 s when the node's reads 1000 s
	p := liveness.Permit{Until: 14 * s, Margin: 500 * time.Millisecond, Volumes: map[volume.ID]time.Duration{"v": 12 * s, "free": liveness.Forever, "fenced": 10 * s}}
	if err := w.Publish(p, guardNow); err != nil {
		t.Fatal(err)
	}
	n.clock.Store(int64(1001 * s))
	got, now, err := New(dir, "a", n.opts()).Read()
	if err != nil {
		t.Fatal(err)
	}
	if now != 1001*s || got.Until != 1004*s || got.Margin != p.Margin || got.Volumes["v"] != 1002*s || got.Volumes["free"] != liveness.Forever || got.Volumes["fenced"] != 1000*s || len(got.Volumes) != 3 {
		t.Fatalf("read %+v at %s", got, now)
	}
	if st, err := os.Stat(PermitPath(dir, "a")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("permit file: %v %v", st.Mode(), err)
	}
}

// The node's clock is read before the caller's: whatever delay comes
// between the two reads (here a second at every read), a converted
// deadline is never later than the caller's.
func TestAConvertedDeadlineIsNeverLaterThanTheCallers(t *testing.T) {
	dir := t.TempDir()
	var real atomic.Int64 // the true instant; the caller's clock reads 989 s less than the node's
	real.Store(int64(1000 * s))
	tick := func() time.Duration { return time.Duration(real.Add(int64(s)) - int64(s)) }
	opts := Options{Clock: tick, BootID: func() (string, error) { return "boot-1", nil }}
	caller := func() time.Duration { return tick() - 989*s }
	if err := New(dir, "a", opts).Publish(liveness.Permit{Until: 14 * s}, caller); err != nil {
		t.Fatal(err)
	}
	// The caller's 14 s is the node's 1003 s.
	p, _, err := New(dir, "a", opts).Read()
	if err != nil || p.Until > 1003*s {
		t.Fatalf("until %s (%v), want 1003s at the latest", p.Until, err)
	}
}

// No file, or one written before the node booted again, is no permit
// (ErrNotFound); a file of another node in the same directory is not this
// node's.
func TestAMissingOrStalePermitIsNone(t *testing.T) {
	dir := t.TempDir()
	n := newNode(1000*s, "boot-1")
	if _, _, err := New(dir, "a", n.opts()).Read(); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := New(dir, "b", n.opts()).Publish(liveness.Permit{Until: 5 * s}, func() time.Duration { return 0 }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(dir, "a", n.opts()).Read(); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("another node's permit read as a's: %v", err)
	}
	if err := New(dir, "a", n.opts()).Publish(liveness.Permit{Until: 5 * s}, func() time.Duration { return 0 }); err != nil {
		t.Fatal(err)
	}
	n.boot.Store("boot-2")
	n.clock.Store(int64(3 * s)) // the clock started again: 1005 s would look far ahead
	if p, _, err := New(dir, "a", n.opts()).Read(); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("a permit of the last boot read as %+v, %v", p, err)
	}
	// A file that is not a permit at all is an error (an armed watchdog
	// fences on it).
	if err := os.WriteFile(PermitPath(dir, "a"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(dir, "a", n.opts()).Read(); err == nil || errors.Is(err, ports.ErrNotFound) || errors.Is(err, ports.ErrPermitVersion) {
		t.Fatalf("a broken permit read: %v", err)
	}
}

// A permit is written with its format's version and read only in it: one
// of another version (a newer daemon's, or one without any) is
// ErrPermitVersion, whatever it holds.
func TestAPermitOfAnotherVersionIsNotUnderstood(t *testing.T) {
	dir := t.TempDir()
	n := newNode(1000*s, "boot-1")
	if err := New(dir, "a", n.opts()).Publish(liveness.Permit{Until: 5 * s}, func() time.Duration { return 0 }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(PermitPath(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"version":1`) {
		t.Fatalf("written without its version: %s", b)
	}
	for _, other := range []string{`"version":2`, `"version":0`} {
		if err := os.WriteFile(PermitPath(dir, "a"), []byte(strings.Replace(string(b), `"version":1`, other, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := New(dir, "a", n.opts()).Read(); !errors.Is(err, ports.ErrPermitVersion) {
			t.Fatalf("%s read: %v", other, err)
		}
	}
	var f map[string]any
	_ = json.Unmarshal(b, &f)
	delete(f, "version")
	nov, _ := json.Marshal(f)
	if err := os.WriteFile(PermitPath(dir, "a"), nov, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := New(dir, "a", n.opts()).Read(); !errors.Is(err, ports.ErrPermitVersion) {
		t.Fatalf("a permit without a version read: %v", err)
	}
}

// A permit replaced while readers read is always read whole: the old one
// or the new one, never a mix or a part; no temporary file is left.
func TestAPermitIsReplacedAtomically(t *testing.T) {
	dir := t.TempDir()
	n := newNode(1000*s, "boot-1")
	w := New(dir, "a", n.opts())
	big := map[volume.ID]time.Duration{}
	for i := range 500 {
		big[volume.ID(filepath.Join("volume", string(rune('a'+i%26)), time.Duration(i).String()))] = time.Duration(i)
	}
	if err := w.Publish(liveness.Permit{Until: 1, Volumes: big}, func() time.Duration { return 0 }); err != nil {
		t.Fatal(err)
	}
	count := len(big)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var reads, bad atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := New(dir, "a", n.opts())
			for !stop.Load() {
				p, _, err := r.Read()
				reads.Add(1)
				if err != nil || len(p.Volumes) != count || p.Volumes[volume.ID("volume/b/1ns")]-p.Until != 0 {
					bad.Add(1)
				}
			}
		}()
	}
	for i := 1; i <= 100; i++ {
		for id := range big {
			big[id] = time.Duration(i) // every deadline equal to Until in each version
		}
		if err := w.Publish(liveness.Permit{Until: time.Duration(i), Volumes: big}, func() time.Duration { return 1000 * s }); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() != 0 || reads.Load() == 0 {
		t.Fatalf("%d of %d reads saw a partial or mixed permit", bad.Load(), reads.Load())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left in the directory: %v", entries)
	}
}

// A reader keeps the permit it parsed while the file is the same, and
// reads every replacement, however alike (same size, written within the
// same instant, an inode number reused).
func TestAReaderReadsEveryReplacement(t *testing.T) {
	dir := t.TempDir()
	n := newNode(1000*s, "boot-1")
	w, r := New(dir, "a", n.opts()), New(dir, "a", n.opts())
	for i := range 500 {
		until := time.Duration(1 + i%9) // one digit: every file the same size
		if err := w.Publish(liveness.Permit{Until: until}, func() time.Duration { return 1000 * s }); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			p, _, err := r.Read()
			if err != nil || p.Until != until {
				t.Fatalf("round %d: read %s (%v), published %s", i, p.Until, err, until)
			}
		}
	}
}

func TestFenceRecordsAreThisNodesOfThisBoot(t *testing.T) {
	dir := t.TempDir()
	n := newNode(0, "boot-1")
	a, b := New(dir, "a", n.opts()), New(dir, "b", n.opts())
	if err := a.Record("v", "the deadline passed"); err != nil {
		t.Fatal(err)
	}
	if err := a.Record("w", "no permit"); err != nil {
		t.Fatal(err)
	}
	if err := b.Record("v", "b's"); err != nil {
		t.Fatal(err)
	}
	got, err := a.Recorded()
	if err != nil || len(got) != 2 || got["v"] != "the deadline passed" || got["w"] != "no permit" {
		t.Fatalf("%v %v", got, err)
	}
	if err := a.Clear("w", "an earlier fence's reason"); err != nil {
		t.Fatal(err)
	}
	if err := a.Clear("v", "the deadline passed"); err != nil {
		t.Fatal(err)
	}
	if err := a.Clear("v", "the deadline passed"); err != nil {
		t.Fatalf("clearing nothing: %v", err)
	}
	if got, _ := a.Recorded(); len(got) != 1 || got["w"] == "" {
		t.Fatalf("after clear: %v", got)
	}
	n.boot.Store("boot-2")
	if got, err := a.Recorded(); err != nil || len(got) != 0 {
		t.Fatalf("records of the last boot: %v %v", got, err)
	}
	if got, err := b.Recorded(); err != nil || len(got) != 0 {
		t.Fatalf("b's records of the last boot: %v %v", got, err)
	}
	n.boot.Store("boot-1")
	if got, _ := a.Recorded(); len(got) != 0 {
		t.Fatalf("a record of an earlier boot was kept: %v", got)
	}
}

// The node's own clock and boot: CLOCK_BOOTTIME runs with CLOCK_MONOTONIC
// and is never behind it; the boot ID is the same for every read.
func TestTheNodesClockAndBoot(t *testing.T) {
	var mono unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono); err != nil {
		t.Fatal(err)
	}
	if b := BootClock(); b < time.Duration(mono.Nano()) {
		t.Fatalf("boot clock %s behind the monotonic clock %s", b, time.Duration(mono.Nano()))
	}
	id1, err1 := BootID()
	id2, err2 := BootID()
	if err1 != nil || err2 != nil || id1 == "" || id1 != id2 {
		t.Fatalf("boot id %q %q: %v %v", id1, id2, err1, err2)
	}
	// A real round trip on the node's clock: a deadline 2 s ahead of the
	// caller's now is about 2 s ahead of the node's.
	dir := t.TempDir()
	start := time.Now()
	since := func() time.Duration { return time.Since(start) }
	if err := New(dir, "a", Options{}).Publish(liveness.Permit{Until: since() + 2*s}, since); err != nil {
		t.Fatal(err)
	}
	p, now, err := New(dir, "a", Options{}).Read()
	if left := p.Until - now; err != nil || left > 2*s || left < s {
		t.Fatalf("left %s (%v)", left, err)
	}
}
