//go:build linux

// Package permitfile keeps a node's write permit (ports.PermitPublisher,
// ports.PermitReader) and its volume managers' fence records
// (ports.FenceRecords) as small files in a host directory the node's
// daemon and its replica pods share (the control directory of their
// sockets, which only root enters).
//
// The permit's instants are stored on CLOCK_BOOTTIME: one clock for every
// process of the node (Kubernetes gives pods no time namespace), running
// on while the node is suspended, so that a node resumed past its
// deadline finds it passed. A file written before the node last booted
// (its boot ID, /proc/sys/kernel/random/boot_id, differs) is no permit:
// its instants belong to a clock that started again. A file is replaced
// by rename, so a reader sees the old permit or the new one, never part
// of one; a crash of the node between the write and the rename is a
// reboot, which voids the file anyway, so nothing is synced.
//
// The adapter decides nothing: the guard says what the permit is, the
// volume manager's watchdog what it means (domain/liveness).
package permitfile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/domain/liveness"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Options are a Dir's clock and boot identity; the zero value reads the
// node's (tests give their own).
type Options struct {
	// Clock reads the node's clock (CLOCK_BOOTTIME).
	Clock func() time.Duration
	// BootID identifies the node's current boot.
	BootID func() (string, error)
}

// Dir is a node's permit and fence records in one directory.
type Dir struct {
	dir  string
	node replica.Node
	opts Options

	mu     sync.Mutex
	cached *readCache // the last permit read, by its file's identity
}

// readCache is a permit read and the identity of its file: a permit is
// never changed in place (a new file is renamed over it), so a file with
// the same device, inode, size, modification and change times holds the
// same permit (an inode number reused by a later file has later times).
type readCache struct {
	key  [5]int64
	file permitFile
}

func statKey(st *unix.Stat_t) [5]int64 {
	return [5]int64{int64(st.Dev), int64(st.Ino), st.Size, st.Mtim.Nano(), st.Ctim.Nano()}
}

var (
	_ ports.PermitPublisher = (*Dir)(nil)
	_ ports.PermitReader    = (*Dir)(nil)
	_ ports.FenceRecords    = (*Dir)(nil)
)

// New returns node's permit and records in dir.
func New(dir string, node replica.Node, opts Options) *Dir {
	if opts.Clock == nil {
		opts.Clock = BootClock
	}
	if opts.BootID == nil {
		opts.BootID = BootID
	}
	return &Dir{dir: dir, node: node, opts: opts}
}

// BootClock reads CLOCK_BOOTTIME.
func BootClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_BOOTTIME): %v", err)) // Linux has had it since 2.6.39
	}
	return time.Duration(ts.Nano())
}

// BootID reads the kernel's boot ID.
func BootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// name is a fixed-length file name for key, distinct per node (several
// test nodes may share one host directory).
func name(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + hex.EncodeToString(sum[:16]) + ".json"
}

// PermitPath is where node's permit lies in dir.
func PermitPath(dir string, node replica.Node) string {
	return filepath.Join(dir, name("permit-", string(node)))
}

const clockName = "CLOCK_BOOTTIME"

// PermitVersion is the version of the permit's format this package
// writes and reads: a reader of another version takes the permit for
// none it understands (ports.ErrPermitVersion), so that a volume manager
// and a daemon of different formats never act on each other's permit. A
// file without a version (0) is not one either.
const PermitVersion = 1

// permitFile is the permit as stored; instants in nanoseconds of Clock.
type permitFile struct {
	Version int              `json:"version"`
	Node    string           `json:"node"`
	Boot    string           `json:"boot"`
	Clock   string           `json:"clock"`
	Written int64            `json:"written"`
	Until   int64            `json:"until"`
	Margin  int64            `json:"margin"`
	Volumes map[string]int64 `json:"volumes,omitempty"`
}

// Publish implements ports.PermitPublisher.
func (d *Dir) Publish(p liveness.Permit, now func() time.Duration) error {
	boot, err := d.opts.BootID()
	if err != nil {
		return fmt.Errorf("publish the permit: %w", err)
	}
	// The node's clock first: converted, an instant is never later than
	// the caller's.
	host := d.opts.Clock()
	shift := host - now()
	conv := func(t time.Duration) int64 {
		if t == liveness.Forever {
			return int64(liveness.Forever)
		}
		return int64(t + shift)
	}
	f := permitFile{Version: PermitVersion, Node: string(d.node), Boot: boot, Clock: clockName, Written: int64(host), Until: conv(p.Until), Margin: int64(p.Margin)}
	if len(p.Volumes) > 0 {
		f.Volumes = make(map[string]int64, len(p.Volumes))
		for id, t := range p.Volumes {
			f.Volumes[string(id)] = conv(t)
		}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("publish the permit: %w", err)
	}
	return d.replace(PermitPath(d.dir, d.node), b)
}

// Read implements ports.PermitReader.
func (d *Dir) Read() (liveness.Permit, time.Duration, error) {
	path := PermitPath(d.dir, d.node)
	f, err := d.readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return liveness.Permit{}, 0, fmt.Errorf("no permit at %s: %w", path, ports.ErrNotFound)
	}
	if err != nil {
		return liveness.Permit{}, 0, fmt.Errorf("read the permit %s: %w", path, err)
	}
	boot, err := d.opts.BootID()
	if err != nil {
		return liveness.Permit{}, 0, fmt.Errorf("read the permit: %w", err)
	}
	switch {
	case f.Version != PermitVersion:
		return liveness.Permit{}, 0, fmt.Errorf("the permit %s is of version %d, this reader knows %d: %w", path, f.Version, PermitVersion, ports.ErrPermitVersion)
	case f.Node != string(d.node):
		return liveness.Permit{}, 0, fmt.Errorf("the permit %s is node %q's, not %s's", path, f.Node, d.node)
	case f.Clock != clockName:
		return liveness.Permit{}, 0, fmt.Errorf("the permit %s is on clock %q, not %s", path, f.Clock, clockName)
	case f.Boot != boot:
		return liveness.Permit{}, 0, fmt.Errorf("the permit %s was written before the node booted (boot %s, now %s): %w", path, f.Boot, boot, ports.ErrNotFound)
	}
	p := liveness.Permit{Until: time.Duration(f.Until), Margin: time.Duration(f.Margin)}
	if len(f.Volumes) > 0 {
		p.Volumes = make(map[volume.ID]time.Duration, len(f.Volumes))
		for id, t := range f.Volumes {
			p.Volumes[volume.ID(id)] = time.Duration(t)
		}
	}
	return p, d.opts.Clock(), nil
}

// readFile parses the permit at path, or returns the one parsed last when
// the file is the same (a watchdog reads it several times a second, the
// guard replaces it about once).
func (d *Dir) readFile(path string) (permitFile, error) {
	fd, err := os.Open(path)
	if err != nil {
		return permitFile{}, err
	}
	defer fd.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err != nil {
		return permitFile{}, err
	}
	key := statKey(&st)
	d.mu.Lock()
	c := d.cached
	d.mu.Unlock()
	if c != nil && c.key == key {
		return c.file, nil
	}
	b, err := io.ReadAll(fd)
	if err != nil {
		return permitFile{}, err
	}
	var f permitFile
	if err := json.Unmarshal(b, &f); err != nil {
		return permitFile{}, err
	}
	d.mu.Lock()
	d.cached = &readCache{key: key, file: f}
	d.mu.Unlock()
	return f, nil
}

// replace writes b to path by rename, so that a reader sees the old file
// or the new one, never part of either.
func (d *Dir) replace(path string, b []byte) error {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return fmt.Errorf("control directory %s: %w", d.dir, err)
	}
	tmp, err := os.CreateTemp(d.dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// record is a fence record as stored.
type record struct {
	Node   string `json:"node"`
	Volume string `json:"volume"`
	Boot   string `json:"boot"`
	Reason string `json:"reason"`
}

func (d *Dir) recordPath(id volume.ID) string {
	return filepath.Join(d.dir, name("fenced-", string(d.node)+"\x00"+string(id)))
}

// Record implements ports.FenceRecords.
func (d *Dir) Record(id volume.ID, reason string) error {
	boot, err := d.opts.BootID()
	if err != nil {
		return fmt.Errorf("record the fence of %s: %w", id, err)
	}
	b, err := json.Marshal(record{Node: string(d.node), Volume: string(id), Boot: boot, Reason: reason})
	if err != nil {
		return err
	}
	return d.replace(d.recordPath(id), b)
}

// Recorded implements ports.FenceRecords; it removes the records of an
// earlier boot.
func (d *Dir) Recorded() (map[volume.ID]string, error) {
	paths, err := filepath.Glob(filepath.Join(d.dir, "fenced-*.json"))
	if err != nil {
		return nil, err
	}
	boot, err := d.opts.BootID()
	if err != nil {
		return nil, fmt.Errorf("fence records: %w", err)
	}
	out := map[volume.ID]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // cleared meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("fence records: %w", err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.Node != string(d.node) {
			continue // another node's (or not a record)
		}
		if r.Boot != boot {
			_ = os.Remove(p)
			continue
		}
		out[volume.ID(r.Volume)] = r.Reason
	}
	return out, nil
}

// Clear implements ports.FenceRecords. A record rewritten between its
// read and its removal here (microseconds) would go: the only cost is a
// placeholder that stays until the pod is restarted by hand.
func (d *Dir) Clear(id volume.ID, reason string) error {
	path := d.recordPath(id)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clear the fence record of %s: %w", id, err)
	}
	var r record
	if json.Unmarshal(b, &r) == nil && r.Reason != reason {
		return nil // a later fence's
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("clear the fence record of %s: %w", id, err)
	}
	return nil
}
