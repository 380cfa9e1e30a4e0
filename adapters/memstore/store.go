package memstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Store is an in-memory SnapshotStore rooted in a directory.
type Store struct {
	mu       sync.Mutex
	dir      string
	total    int64
	volumes  map[volume.ID]*vol
	txg      uint64
	guidSeed uint64
	now      func() time.Time
	kept     map[string]files // copies kept aside, by KeptCopy.Name
	keptFrom map[string]volume.ID
}

var _ ports.SnapshotStore = (*Store)(nil)

type vol struct {
	id       volume.ID
	capacity int64
	props    map[string]string
	meta     map[string]string
	snaps    []*snap // oldest first
}

type snap struct {
	name    string
	guid    uint64
	txg     uint64
	created time.Time
	meta    map[string]string
	files   files
}

// New returns an empty store whose volumes live under dir, with a pool of
// totalBytes. guidSeed makes GUIDs distinct between stores that exchange
// streams (use a different seed per simulated node).
func New(dir string, totalBytes int64, guidSeed uint64) *Store {
	return &Store{dir: dir, total: totalBytes, volumes: map[volume.ID]*vol{}, kept: map[string]files{}, keptFrom: map[string]volume.ID{}, guidSeed: guidSeed << 32, now: time.Now}
}

func (s *Store) path(id volume.ID) string { return filepath.Join(s.dir, string(id)) }

func (s *Store) nextTxg() uint64 { s.txg++; return s.txg }

func (s *Store) lookup(id volume.ID) (*vol, error) {
	v, ok := s.volumes[id]
	if !ok {
		return nil, fmt.Errorf("volume %s: %w", id, ports.ErrNotFound)
	}
	return v, nil
}

func (s *Store) reserved() int64 {
	var n int64
	for _, f := range s.kept {
		n += f.size()
	}
	for _, v := range s.volumes {
		n += v.capacity
	}
	return n
}

func (s *Store) CreateVolume(ctx context.Context, id volume.ID, opts ports.CreateOptions) (ports.VolumeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.volumes[id]; ok {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: %w", id, ports.ErrExists)
	}
	// Refuse what a pool refuses: values outside the domain's allow-list
	// (ZFS itself accepts every allow-listed value on OpenZFS 2.x).
	if _, err := volume.ParseParams(opts.Properties); err != nil {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: %v: %w", id, err, ports.ErrInvalid)
	}
	if opts.Encryption.On() {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: an in-memory store cannot encrypt: %w", id, volume.ErrUnsupported)
	}
	if opts.CapacityBytes > s.total-s.reserved() {
		return ports.VolumeInfo{}, fmt.Errorf("create volume %s: %d bytes: %w", id, opts.CapacityBytes, ports.ErrNoSpace)
	}
	if err := os.MkdirAll(s.path(id), 0o755); err != nil {
		return ports.VolumeInfo{}, err
	}
	v := &vol{id: id, capacity: opts.CapacityBytes, props: copyMap(opts.Properties), meta: copyMap(opts.Metadata)}
	s.volumes[id] = v
	return s.info(v), nil
}

func (s *Store) info(v *vol) ports.VolumeInfo {
	used := dirSize(s.path(v.id))
	return ports.VolumeInfo{
		ID:             v.id,
		CapacityBytes:  v.capacity,
		UsedBytes:      used,
		AvailableBytes: max(0, v.capacity-used),
		MountPath:      s.path(v.id),
		MountSource:    s.path(v.id),
		Encryption:     plaintext,
		Properties:     copyMap(v.props),
		Metadata:       copyMap(v.meta),
	}
}

func (s *Store) GetVolume(ctx context.Context, id volume.ID) (ports.VolumeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return ports.VolumeInfo{}, err
	}
	return s.info(v), nil
}

func (s *Store) ListVolumes(ctx context.Context) ([]ports.VolumeInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ports.VolumeInfo, 0, len(s.volumes))
	for _, v := range s.volumes {
		out = append(out, s.info(v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *Store) DestroyVolume(ctx context.Context, id volume.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookup(id); err != nil {
		return err
	}
	if err := os.RemoveAll(s.path(id)); err != nil {
		return fmt.Errorf("destroy volume %s: %v: %w", id, err, ports.ErrBusy)
	}
	delete(s.volumes, id)
	return nil
}

func (s *Store) Resize(ctx context.Context, id volume.ID, capacityBytes int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return err
	}
	if capacityBytes-v.capacity > s.total-s.reserved() {
		return fmt.Errorf("resize volume %s: %w", id, ports.ErrNoSpace)
	}
	if capacityBytes < dirSize(s.path(id)) {
		return fmt.Errorf("resize volume %s below its data: %w", id, ports.ErrInvalid)
	}
	v.capacity = capacityBytes
	return nil
}

func (s *Store) SetProperties(ctx context.Context, id volume.ID, properties map[string]string) error {
	if _, err := volume.ParseParams(properties); err != nil {
		return fmt.Errorf("volume %s: %v: %w", id, err, ports.ErrInvalid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return err
	}
	for k, val := range properties {
		v.props[k] = val
	}
	return nil
}

func (s *Store) SetMetadata(ctx context.Context, id volume.ID, metadata map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return err
	}
	for k, val := range metadata {
		v.meta[k] = val
	}
	return nil
}

// Unchanged: a directory cannot tell what was written since a snapshot.
func (s *Store) Unchanged(ctx context.Context, id volume.ID) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.lookup(id)
	return false, err
}

// Remount: a directory has no mount to refresh; the volume must exist.
func (s *Store) Remount(ctx context.Context, id volume.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.lookup(id)
	return err
}

func (s *Store) Capacity(ctx context.Context) (ports.PoolCapacity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ports.PoolCapacity{AvailableBytes: s.total - s.reserved(), TotalBytes: s.total}, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// KeepAside keeps a copy of the volume's files, as they are now, in
// memory: no volume, listed nowhere, and untouched by the volume's
// rollbacks and destruction. It counts against the pool like a volume.
func (s *Store) KeepAside(ctx context.Context, id volume.ID, name string) (ports.KeptCopy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.lookup(id); err != nil {
		return ports.KeptCopy{}, err
	}
	key := "kept/" + string(id) + "-" + name
	if f, ok := s.kept[key]; ok {
		return keptCopy(key, id, f), nil
	}
	f, err := readFiles(s.path(id))
	if err != nil {
		return ports.KeptCopy{}, err
	}
	if f.size() > s.total-s.reserved() {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: %d bytes: %w", id, f.size(), ports.ErrNoSpace)
	}
	s.kept[key], s.keptFrom[key] = f, id
	return keptCopy(key, id, f), nil
}

func keptCopy(key string, id volume.ID, f files) ports.KeptCopy {
	return ports.KeptCopy{Name: key, Volume: id, Root: "kept", Inspect: "memstore: KeptFiles(" + key + ")", Drop: "memstore: DropKept(" + key + ")", SizeBytes: f.size()}
}

var _ ports.KeptCopies = (*Store)(nil)

// ListKept implements ports.KeptCopies.
func (s *Store) ListKept(context.Context) ([]ports.KeptCopy, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ports.KeptCopy, 0, len(s.kept))
	for key, f := range s.kept {
		out = append(out, keptCopy(key, s.keptFrom[key], f))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// KeptFiles returns the files of a copy kept aside (nil when none), by
// KeptCopy.Name.
func (s *Store) KeptFiles(name string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.kept[name]
	if !ok {
		return nil
	}
	out := make(map[string][]byte, len(f))
	for k, v := range f {
		out[k] = append([]byte(nil), v...)
	}
	return out
}

// DropKept forgets a copy kept aside, as an operator would destroy it.
func (s *Store) DropKept(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.kept, name)
	delete(s.keptFrom, name)
}

// LockWrites implements ports.WriteLock by its record alone: a directory
// has no read-only switch of its own (the watchdog's holders are stopped
// all the same).
func (s *Store) LockWrites(ctx context.Context, id volume.ID, reason string) error {
	if reason == "" {
		reason = "locked"
	}
	return s.SetMetadata(ctx, id, map[string]string{ports.MetaWritesLocked: reason})
}

// UnlockWrites implements ports.WriteLock: the record removed.
func (s *Store) UnlockWrites(ctx context.Context, id volume.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return err
	}
	delete(v.meta, ports.MetaWritesLocked)
	return nil
}

var _ ports.WriteLock = (*Store)(nil)

// plaintext is what an in-memory store says of every volume's encryption.
var plaintext = volume.Stored{Known: true, Cipher: "off", KeyFormat: "none"}

// LoadKey implements ports.SnapshotStore: no volume here is encrypted.
func (s *Store) LoadKey(ctx context.Context, id volume.ID, _ volume.Key) error {
	if _, err := s.GetVolume(ctx, id); err != nil {
		return err
	}
	return fmt.Errorf("load key of volume %s: an in-memory store does not encrypt: %w", id, ports.ErrInvalid)
}

// UnloadKey implements ports.SnapshotStore: nothing to unload.
func (s *Store) UnloadKey(ctx context.Context, id volume.ID) error {
	_, err := s.GetVolume(ctx, id)
	return err
}
