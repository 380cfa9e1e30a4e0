package zfs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	gozfs "github.com/mistifyio/go-zfs/v3"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Config selects the pool and the parent dataset the store owns.
type Config struct {
	Pool   string // an existing pool, e.g. "ferry"
	Parent string // a dataset path under the pool, e.g. "ferry" or "k8s/ferry"
	// Driver is written to every volume as its ownership mark.
	Driver string
	// ZFS and Zpool are the CLI paths; empty means "zfs" and "zpool" on PATH.
	ZFS, Zpool string
	// HostRoot is where the host's tools are mounted in this container
	// ("" for none): the image's zfs runs the host's there, which mounts
	// a dataset below it too. Those views are no other mounts of it.
	HostRoot string
	// Observe, when set, hears every zfs and zpool command this store's
	// runner runs (not the destroy, set and rollback go-zfs runs): the
	// tool's name, its subcommand, how long it ran (a stream: until its
	// end) and its error (metrics).
	Observe func(tool, subcommand string, took time.Duration, err error)
}

// maxRootLength leaves room under ZFS's 255-byte name limit for a volume
// (volume.MaxNameLength) and a snapshot (volume.MaxStoreSnapshotName).
const maxRootLength = 255 - 2 - volume.MaxNameLength - volume.MaxStoreSnapshotName

// Store is a ports.SnapshotStore on one ZFS pool.
type Store struct {
	cfg  Config
	root string // <pool>/<parent>
	run  runner
	// resumable: the pool's ZFS keeps interrupted receives (`zfs recv -s`,
	// receive_resume_token, `zfs send -t`): OpenZFS does, zfs-fuse does not.
	resumable bool
	// txg: the shared `zpool sync` that makes a written=0 truthful.
	txg *poolSync
	// noWritten: the pool's zfs answered that it has no written property
	// (zfs-fuse): Unchanged asks no more, it cannot tell.
	noWritten atomic.Bool
	// encrypts: the pool can hold encrypted datasets (OpenZFS with
	// feature@encryption); zfs-fuse cannot (encryption.go).
	encrypts bool
	// features: what the pool sends and takes beyond plain streams
	// (features.go).
	features volume.StreamFeatures
	// log: what the store tells the operator once (SetLogger).
	log *zap.Logger
	// parentEncrypted logs once per process that volumes are encrypted
	// at rest by their parent and sent decrypted over mTLS.
	parentEncrypted sync.Once
	// plain: volumes whose sends a check found plain (volume.ID to
	// struct{}; encryption.go, knownPlain).
	plain sync.Map
}

var _ ports.SnapshotStore = (*Store)(nil)

// New returns a store for cfg. Open must succeed before other calls.
func New(cfg Config) (*Store, error) {
	if cfg.Pool == "" || cfg.Driver == "" {
		return nil, errors.New("zfs store: pool and driver are required")
	}
	for _, part := range strings.Split(cfg.Parent, "/") {
		if _, err := volume.ParseID("parent dataset", part); err != nil && cfg.Parent != "" {
			return nil, fmt.Errorf("zfs store: %w", err)
		}
	}
	if cfg.ZFS == "" {
		cfg.ZFS = "zfs"
	}
	if cfg.Zpool == "" {
		cfg.Zpool = "zpool"
	}
	root := cfg.Pool
	if cfg.Parent != "" {
		root += "/" + cfg.Parent
	}
	if len(root) > maxRootLength {
		return nil, fmt.Errorf("zfs store: %q is longer than %d bytes: volume and snapshot names would not fit ZFS's 255", root, maxRootLength)
	}
	return &Store{cfg: cfg, root: root, run: runner{zfsBin: cfg.ZFS, zpoolBin: cfg.Zpool, slots: make(chan struct{}, MaxConcurrentCommands), observe: cfg.Observe, stuck: &stuckCommands{}}, txg: newPoolSync(), log: zap.NewNop()}, nil
}

// SetLogger sets where the store logs what the operator should know once
// (the encryption mode found, volumes encrypted by their parent); no
// logging without it. Call it before Open.
func (s *Store) SetLogger(log *zap.Logger) {
	if log != nil {
		s.log = log
	}
}

// PoolThere checks, with one call, that the pool exists (a daemon's
// preflight: the rest of Open follows once it does).
func (s *Store) PoolThere(ctx context.Context) error {
	if _, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "type", s.cfg.Pool); err != nil {
		return fmt.Errorf("pool %s: %w", s.cfg.Pool, err)
	}
	return nil
}

// Open checks that the pool exists and creates the parent dataset if needed.
func (s *Store) Open(ctx context.Context) error {
	if err := s.PoolThere(ctx); err != nil {
		return err
	}
	if s.root != s.cfg.Pool {
		_, err := s.run.zfs(ctx, "create", "-p", s.root)
		if err != nil && !errors.Is(err, ports.ErrExists) {
			return fmt.Errorf("parent dataset %s: %w", s.root, err)
		}
	}
	s.resumable = s.detectResume(ctx)
	encrypts, err := s.detectEncryption(ctx)
	if err != nil {
		return err
	}
	s.encrypts = encrypts
	if s.resumable {
		// OpenZFS (resumable receives): its pool's feature flags say
		// which streams it takes; zfs-fuse takes plain streams only.
		f, err := s.detectFeatures(ctx)
		if err != nil {
			return err
		}
		s.features = f
		s.log.Info("zfs streams: the pool sends and takes these beyond plain streams, where its peers do too", zap.String("pool", s.cfg.Pool),
			zap.Bool("compressed", f.Compressed), zap.Bool("largeBlocks", f.LargeBlocks), zap.Bool("embedded", f.Embedded))
	}
	if encrypts {
		s.log.Info("zfs encryption: the pool can hold encrypted volumes (OpenZFS, feature@encryption)", zap.String("pool", s.cfg.Pool))
	} else {
		s.log.Info("zfs encryption: the pool cannot encrypt (zfs-fuse, or feature@encryption disabled): encrypted StorageClasses are refused here", zap.String("pool", s.cfg.Pool))
	}
	return nil
}

// Resumable reports whether interrupted transfers resume where they
// stopped (OpenZFS) or restart from the last complete snapshot (zfs-fuse).
func (s *Store) Resumable() bool { return s.resumable }

// Root is the dataset under which every volume lives.
func (s *Store) Root() string { return s.root }

func (s *Store) dataset(id volume.ID) string { return s.root + "/" + string(id) }

func (s *Store) snapshot(id volume.ID, name string) string { return s.dataset(id) + "@" + name }

// get runs one `zfs get` of propList on targets (zfs-fuse's `get` has no
// -t filter: callers pick rows by type).
func (s *Store) get(ctx context.Context, targets ...string) ([]*propRow, error) {
	return s.getDepth(ctx, 0, targets...)
}

// getDepth is get including depth levels below the targets. A dataset's
// snapshots are one level below it.
func (s *Store) getDepth(ctx context.Context, depth int, targets ...string) ([]*propRow, error) {
	args := []string{"get", "-H", "-p", "-o", "name,property,value,source"}
	if depth > 0 {
		args = append(args, "-d", strconv.Itoa(depth))
	}
	args = append(args, s.listProps())
	args = append(args, targets...)
	out, err := s.run.zfs(ctx, args...)
	if err != nil {
		return nil, err
	}
	return parseGet(out)
}

// owned reports whether row is one of this store's volumes.
func (s *Store) owned(row *propRow) bool {
	return row.meta[ports.MetaDriver] == s.cfg.Driver && row.native["type"] == "filesystem"
}

func (s *Store) volumeInfo(id volume.ID, row *propRow) ports.VolumeInfo {
	props := map[string]string{}
	for _, p := range readableProps {
		if v, ok := row.native[p]; ok {
			props[p] = v
		}
	}
	return ports.VolumeInfo{
		ID:             id,
		CapacityBytes:  row.int64("refquota"),
		UsedBytes:      row.int64("referenced"),
		AvailableBytes: row.int64("available"),
		MountPath:      row.native["mountpoint"],
		MountSource:    row.name,
		Properties:     props,
		Metadata:       row.meta,
		Encryption:     s.stored(row),
	}
}

func (s *Store) snapshotInfo(id volume.ID, row *propRow) ports.SnapshotInfo {
	_, name, _ := strings.Cut(row.name, "@")
	return ports.SnapshotInfo{
		Volume:    id,
		Name:      name,
		GUID:      row.uint64("guid"),
		CreateTxg: row.uint64("createtxg"),
		CreatedAt: time.Unix(row.int64("creation"), 0).UTC(),
		SizeBytes: row.int64("referenced"),
		Metadata:  row.meta,
	}
}

// Capacity reports the space left under the parent dataset and the pool size.
func (s *Store) Capacity(ctx context.Context) (ports.PoolCapacity, error) {
	rows, err := s.get(ctx, s.root, s.cfg.Pool)
	if err != nil {
		return ports.PoolCapacity{}, err
	}
	var c ports.PoolCapacity
	for _, r := range rows {
		if r.name == s.root {
			c.AvailableBytes = r.int64("available")
		}
		if r.name == s.cfg.Pool {
			c.TotalBytes = r.int64("used") + r.int64("available")
		}
	}
	return c, nil
}

// goZFSError turns a go-zfs error into a classified CommandError.
func goZFSError(err error) error {
	var ze *gozfs.Error
	if errors.As(err, &ze) {
		return &CommandError{Args: strings.Fields(ze.Debug), Stderr: ze.Stderr, Err: ze.Err, Kind: classify(ze.Stderr)}
	}
	return err
}

func sortVolumes(v []ports.VolumeInfo) {
	sort.Slice(v, func(i, j int) bool { return v[i].ID < v[j].ID })
}
