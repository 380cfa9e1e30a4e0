package filecluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ferry-csi/ferry/adapters/casloop"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is a ClusterState kept in a directory, safe for concurrent use by
// goroutines and by processes sharing the directory.
type Store struct {
	dir string
}

var _ ports.ClusterState = (*Store)(nil)

// New returns a store kept in dir, creating the directory if needed. Stores
// opened on the same directory, in any process, share their states.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cluster state directory: %w", err)
	}
	return &Store{dir: dir}, nil
}

// record is the content of <volume>.json.
type record struct {
	Version uint64        `json:"version"`
	State   replica.State `json:"state"`
}

func (s *Store) Get(ctx context.Context, id volume.ID) (replica.State, error) {
	if err := ctx.Err(); err != nil {
		return replica.State{}, err
	}
	if err := checkID(id); err != nil {
		return replica.State{}, fmt.Errorf("cluster state of volume %q: %w", id, err)
	}
	st, _, err := s.read(id)
	if err != nil {
		return replica.State{}, fmt.Errorf("cluster state of volume %s: %w", id, err)
	}
	return st, nil
}

func (s *Store) Create(ctx context.Context, st replica.State) (replica.State, error) {
	if err := ctx.Err(); err != nil {
		return replica.State{}, err
	}
	if err := check(&st); err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %q: %w", st.Volume, err)
	}
	unlock, err := s.lock(st.Volume)
	if err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, err)
	}
	defer unlock()
	switch _, _, err := s.read(st.Volume); {
	case err == nil:
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, ports.ErrExists)
	case !errors.Is(err, ports.ErrNotFound):
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, err)
	}
	deleted, err := s.readSeq(st.Volume)
	if err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, err)
	}
	written, err := s.write(st, deleted+1)
	if err != nil {
		return replica.State{}, fmt.Errorf("create cluster state of volume %s: %w", st.Volume, err)
	}
	return written, nil
}

// Update is an optimistic compare-and-swap loop; see ports.ClusterState.
// Validation happens after the compare, so that a result made invalid only
// by a stale read is retried on fresh data instead of refused.
func (s *Store) Update(ctx context.Context, id volume.ID, fn func(*replica.State) error) (replica.State, error) {
	return casloop.Update(ctx, id, s.Get, s.compareAndSwap, fn)
}

// compareAndSwap writes next if the stored state is still at version read;
// ok is false when someone wrote (or deleted) in between.
func (s *Store) compareAndSwap(read string, next replica.State) (written replica.State, ok bool, err error) {
	unlock, err := s.lock(next.Volume)
	if err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	}
	defer unlock()
	cur, version, err := s.read(next.Volume)
	switch {
	case errors.Is(err, ports.ErrNotFound):
		return replica.State{}, false, nil // deleted in between: the next read says so
	case err != nil:
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	case cur.Version != read:
		return replica.State{}, false, nil
	}
	if err := check(&next); err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	}
	if casloop.Removes(next) {
		if err := s.remove(next.Volume, version); err != nil {
			return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
		}
		next.Version = ""
		return next, true, nil
	}
	written, err = s.write(next, version+1)
	if err != nil {
		return replica.State{}, false, fmt.Errorf("update cluster state of volume %s: %w", next.Volume, err)
	}
	return written, true, nil
}

func (s *Store) Delete(ctx context.Context, id volume.ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return fmt.Errorf("delete cluster state of volume %q: %w", id, err)
	}
	unlock, err := s.lock(id)
	if err != nil {
		return fmt.Errorf("delete cluster state of volume %s: %w", id, err)
	}
	defer unlock()
	cur, version, err := s.read(id)
	if err != nil {
		return fmt.Errorf("delete cluster state of volume %s: %w", id, err)
	}
	if len(cur.Replicas) > 0 {
		if !cur.Deleting {
			cur.Deleting = true
			if _, err := s.write(cur, version+1); err != nil {
				return fmt.Errorf("delete cluster state of volume %s: %w", id, err)
			}
		}
		return nil
	}
	if err := s.remove(id, version); err != nil {
		return fmt.Errorf("delete cluster state of volume %s: %w", id, err)
	}
	return nil
}

// remove deletes id's state at version; the caller holds its lock.
func (s *Store) remove(id volume.ID, version uint64) error {
	// Record the version first: a crash between the two steps leaves the
	// state in place with a counter that is merely ahead, never behind.
	if err := s.writeFile(s.path(id, ".seq"), []byte(strconv.FormatUint(version, 10)+"\n")); err != nil {
		return err
	}
	return os.Remove(s.path(id, ".json"))
}

// Watch is not supported: files tell no one of their changes, and a
// volume manager on this store reads the state every tick.
func (s *Store) Watch(context.Context, volume.ID) (<-chan struct{}, error) {
	return nil, fmt.Errorf("filecluster: watch: %w", ports.ErrUnsupported)
}

func (s *Store) path(id volume.ID, ext string) string {
	return filepath.Join(s.dir, string(id)+ext)
}

// read returns the stored state of id, its Version set, and that version as
// a number; ErrNotFound when there is none.
func (s *Store) read(id volume.ID) (replica.State, uint64, error) {
	data, err := os.ReadFile(s.path(id, ".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return replica.State{}, 0, ports.ErrNotFound
	}
	if err != nil {
		return replica.State{}, 0, err
	}
	var rec record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return replica.State{}, 0, fmt.Errorf("decode %s: %w", s.path(id, ".json"), err)
	}
	if rec.State.Volume != id || rec.Version == 0 {
		return replica.State{}, 0, fmt.Errorf("%s holds volume %q at version %d", s.path(id, ".json"), rec.State.Volume, rec.Version)
	}
	rec.State.Version = strconv.FormatUint(rec.Version, 10)
	return rec.State, rec.Version, nil
}

// readSeq returns the version of the last deleted state of id, 0 if none.
func (s *Store) readSeq(id volume.ID) (uint64, error) {
	data, err := os.ReadFile(s.path(id, ".seq"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("decode %s: %w", s.path(id, ".seq"), err)
	}
	return n, nil
}

// write stores st at version, whatever version st carried, and returns a
// copy with its Version set. The caller holds the volume's lock.
func (s *Store) write(st replica.State, version uint64) (replica.State, error) {
	st.Version = "" // the file's version is the only one
	data, err := json.Marshal(record{Version: version, State: st})
	if err != nil {
		return replica.State{}, err
	}
	if err := s.writeFile(s.path(st.Volume, ".json"), append(data, '\n')); err != nil {
		return replica.State{}, err
	}
	st = casloop.Clone(st)
	st.Version = strconv.FormatUint(version, 10)
	return st, nil
}

// writeFile replaces path with data atomically: readers see the old file or
// the new one, never a part.
func (s *Store) writeFile(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(s.dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// lock takes the exclusive lock of id's state, across processes and, since
// each call opens its own file description, across goroutines too. The
// returned function releases it.
func (s *Store) lock(id volume.ID) (unlock func(), err error) {
	f, err := os.OpenFile(s.path(id, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return func() { _ = f.Close() }, nil // closing the last descriptor releases the lock
}

// checkID refuses IDs that are not plain file names in the directory. The
// domain only lets safe names through; this keeps the store safe on its own
// and keeps volumes apart from the temporary files, which start with a dot.
func checkID(id volume.ID) error {
	if id == "" || strings.ContainsAny(string(id), "/\x00") || strings.HasPrefix(string(id), ".") {
		return fmt.Errorf("volume ID %q is not a plain file name: %w", id, ports.ErrInvalid)
	}
	return nil
}

// check refuses what no stored state may be, as ErrInvalid.
func check(st *replica.State) error {
	if st.Volume == "" {
		return fmt.Errorf("state names no volume: %w", ports.ErrInvalid)
	}
	if err := checkID(st.Volume); err != nil {
		return err
	}
	if err := st.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ports.ErrInvalid, err)
	}
	return nil
}

// clone copies st deeply: Replica holds only values, so copying the slice
// is enough for callers and the store never to share memory.
