package publish

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/app/refusal"
	"github.com/ferry-csi/ferry/app/volumelock"
	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Config is what the node's use cases know about the process they run in.
type Config struct {
	Node replica.Node // the node whose store this process drives
	// KubeletDir is the kubelet's directory: every pod target path lies
	// below it. Empty means volume.DefaultKubeletDir.
	KubeletDir string
	// Locks is the process's table of per-volume locks, shared with the
	// controller's use cases when one process serves both (a delete and a
	// publish of one volume never interleave); nil: a table of its own.
	Locks *volumelock.Locks
}

// Service implements the CSI node's use cases: making a local volume
// appear in a pod's directory and reporting on it.
type Service struct {
	cfg   Config
	store Store
	mount ports.Mounter
	locks *volumelock.Locks
	log   *zap.Logger
	// repl, when set, hands replicated volumes over (WithReplication).
	repl *Replication
	// preparing holds, per volume, the end of a PrepareWriter under way:
	// calls on that volume wait for it instead of being refused.
	preparing sync.Map // volume.ID -> chan struct{}
}

// New returns the node use cases.
func New(cfg Config, store Store, mount ports.Mounter, log *zap.Logger, opts ...Option) *Service {
	if cfg.KubeletDir == "" {
		cfg.KubeletDir = volume.DefaultKubeletDir
	}
	locks := cfg.Locks
	if locks == nil {
		locks = volumelock.New()
	}
	n := &Service{cfg: cfg, store: store, mount: mount, locks: locks, log: log}
	for _, o := range opts {
		o(n)
	}
	return n
}

// Option adds an optional capability to the node use cases.
type Option func(*Service)

// NodeID is the node's CSI node_id.
func (n *Service) NodeID() replica.Node { return n.cfg.Node }

// Request is a NodePublishVolume call.
type Request struct {
	VolumeID   string
	TargetPath string
	ReadOnly   bool
	Capability volume.Capability
	// Secrets are the node-publish Secret the kubelet read for this
	// publish (the StorageClass's csi.storage.k8s.io/node-publish-secret-*):
	// an encrypted volume's key. Never logged.
	Secrets map[string]string
}

// Publish bind-mounts the volume's dataset at the target path, read-only
// when asked (or when the access mode never writes). The target must be a
// clean absolute path below the kubelet directory (volume.ParseTarget);
// only its last component may be created, and no symlink on the way is
// followed (the Mounter's contract): anything else answers InvalidError or
// ports.ErrInvalid with nothing created or mounted. Publishing the same
// volume at the same target the same way again succeeds; a target holding
// something else, or this volume with the other read-only flag, answers
// ErrIncompatible.
func (n *Service) Publish(ctx context.Context, req Request) error {
	id, err := volume.ParseID("volume_id", req.VolumeID)
	if err != nil {
		return err
	}
	target, err := volume.ParseTarget("target_path", req.TargetPath, n.cfg.KubeletDir)
	if err != nil {
		return err
	}
	if ok, why := req.Capability.Supported(); !ok {
		return fmt.Errorf("%s: %w", why, refusal.ErrUnsupported)
	}
	readOnly := req.ReadOnly || req.Capability.Mode.ReadOnly()
	if err := n.waitPrepared(ctx, id); err != nil {
		return err
	}
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return fmt.Errorf("publish volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()
	info, err := n.store.GetVolume(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		if repl, rerr := n.replicated(ctx, id); rerr == nil && repl {
			return n.noLocalCopy(ctx, id)
		}
	}
	if err != nil {
		return err
	}
	log := n.log.With(zap.String("volume", string(id)), zap.String("target", target.Path()))
	m, mounted, err := n.mount.MountAt(target.Path())
	if err != nil {
		return err
	}
	if mounted {
		if m.Source == info.MountSource && m.ReadOnly == readOnly {
			return nil
		}
		return fmt.Errorf("target %s already holds %s (read-only %v): %w", target.Path(), m.Source, m.ReadOnly, refusal.ErrIncompatible)
	}
	if req.Capability.Mode == volume.SingleNodeSingleWriter && !readOnly {
		others, err := n.writableTargets(info, target.Path())
		if err != nil {
			return err
		}
		if why, refused := volume.SingleWriterRefusal(req.Capability.Mode, readOnly, others); refused {
			return fmt.Errorf("publish volume %s at %s: %s: %w", id, target.Path(), why, refusal.ErrPrecondition)
		}
	}
	encrypted, loaded, err := n.loadKey(ctx, id, info, req.Secrets, log)
	if err != nil {
		return err
	}
	if !readOnly {
		repl, err := n.replicated(ctx, id)
		if err != nil {
			return err
		}
		if repl {
			// Mounted read/write only once this replica is the single
			// active primary.
			if err := n.acquire(ctx, id, log); err != nil {
				if loaded {
					n.unloadKey(ctx, id, log)
				}
				return err
			}
		}
	}
	if encrypted {
		// Never bind-mount a bare mountpoint directory: the pod would
		// write onto the node's disk, under the dataset, unencrypted.
		if err := n.datasetMounted(info); err != nil {
			if loaded {
				n.unloadKey(ctx, id, log)
			}
			return fmt.Errorf("publish volume %s: %w", id, err)
		}
	}
	log.Info("publishing volume", zap.Bool("readOnly", readOnly))
	if err := n.mount.BindMount(ctx, info.MountPath, target, readOnly); err != nil {
		return err
	}
	log.Info("volume published", zap.Bool("readOnly", readOnly))
	return nil
}

// maxStacked bounds the unmounts of one Unpublish: a mount that does not
// go away must not turn into an endless loop.
const maxStacked = 16

// Unpublish unmounts the volume from the target path and removes the
// target directory. It removes only what Ferry put there:
//
//   - mounts of this volume's filesystem, as many as are stacked at the
//     target;
//   - any other mount at the target (another filesystem, another volume,
//     or any mount once the volume no longer exists, when nothing proves
//     the mount is Ferry's) is left alone and answers ErrPrecondition: the
//     kubelet must not believe the target clean;
//   - then the target directory, only if it is empty (rmdir): a non-empty
//     directory that nothing is mounted on is left as it is.
//
// A target that is not mounted is already unpublished (OK), whether or not
// the volume still exists: after DeleteVolume the kubelet must not retry
// for ever.
func (n *Service) Unpublish(ctx context.Context, volumeID, targetPath string) error {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return err
	}
	target, err := volume.ParseTarget("target_path", targetPath, n.cfg.KubeletDir)
	if err != nil {
		return err
	}
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return fmt.Errorf("unpublish volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()
	log := n.log.With(zap.String("volume", string(id)), zap.String("target", target.Path()))
	source := "" // the volume's mount source; empty once the volume is gone
	info, err := n.store.GetVolume(ctx, id)
	switch {
	case err == nil:
		source = info.MountSource
	case errors.Is(err, ports.ErrNotFound), errors.Is(err, ports.ErrNotOwned):
	default:
		return err
	}
	for i := 0; ; i++ {
		m, mounted, err := n.mount.MountAt(target.Path())
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		// A fence's placeholder (the node lost its lease) goes like the
		// volume's own mount.
		if m.Source != ports.FencedMountSource && (source == "" || m.Source != source) {
			log.Warn("target holds a mount that is not this volume's: left alone", zap.String("source", m.Source))
			return fmt.Errorf("target %s holds %s, not volume %s; it is left alone: %w", target.Path(), m.Source, id, refusal.ErrPrecondition)
		}
		if i == maxStacked {
			return fmt.Errorf("volume %s is still mounted at %s after %d unmounts", id, target.Path(), i)
		}
		if err := n.mount.Unmount(ctx, target); err != nil {
			return err
		}
	}
	removed, err := n.mount.RemoveDir(target)
	if err != nil {
		return err
	}
	if !removed {
		log.Info("target not removed: absent, or not an empty directory")
	}
	if source != "" {
		if err := n.releaseIfLast(ctx, id, info, log); err != nil {
			return err
		}
		n.unloadKeyIfLast(ctx, id, info, log)
	}
	log.Info("volume unpublished")
	return nil
}

// releaseIfLast ends this node's primary term of a replicated volume when
// no other target of this node still shows the volume (two pods on one
// node may share it): the final snapshot is recorded before the answer. A
// retried unpublish, with the target already gone, releases again: a no-op
// once done.
func (n *Service) releaseIfLast(ctx context.Context, id volume.ID, info ports.VolumeInfo, log *zap.Logger) error {
	repl, err := n.replicated(ctx, id)
	if err != nil || !repl {
		return err
	}
	mounts, err := n.mount.MountsOf(info.MountSource)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if m != path.Clean(info.MountPath) {
			log.Info("volume still published at another target: the primary stays", zap.String("other", m))
			return nil
		}
	}
	return n.release(ctx, id, log)
}

// writableTargets are the volume's read/write mounts on this node other
// than its dataset's own mountpoint and target: pods' targets.
func (n *Service) writableTargets(info ports.VolumeInfo, target string) ([]string, error) {
	mounts, err := n.mount.MountsOf(info.MountSource)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range mounts {
		if p == path.Clean(info.MountPath) || p == target {
			continue
		}
		m, ok, err := n.mount.MountAt(p)
		if err != nil {
			return nil, err
		}
		if ok && !m.ReadOnly {
			out = append(out, p)
		}
	}
	return out, nil
}

// volumePath checks a NodeGetVolumeStats / NodeExpandVolume volume_path.
// Hostile paths (traversal, NUL, overlong, unclean) are refused with an
// InvalidError; a well-formed path where no volume can be published (a
// relative path, a path outside the kubelet directory other than the
// volume's own mountpoint) is not where the volume is: ErrNotFound, the
// code the CSI spec and csi-sanity give "volume does not exist at path".
func (n *Service) volumePath(id volume.ID, info ports.VolumeInfo, p string) error {
	if p == path.Clean(info.MountPath) || volume.Below(p, n.cfg.KubeletDir) {
		return nil
	}
	return fmt.Errorf("volume %s is not published at %q: %w", id, p, ports.ErrNotFound)
}

// Stats reports usage of a published volume at path.
func (n *Service) Stats(ctx context.Context, volumeID, p string) (ports.FsStats, error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return ports.FsStats{}, err
	}
	if err := volume.CheckPath("volume_path", p); err != nil {
		return ports.FsStats{}, err
	}
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return ports.FsStats{}, err
	}
	if err := n.volumePath(id, info, p); err != nil {
		return ports.FsStats{}, err
	}
	if p != path.Clean(info.MountPath) {
		m, mounted, err := n.mount.MountAt(p)
		if err != nil {
			return ports.FsStats{}, err
		}
		if !mounted || m.Source != info.MountSource {
			return ports.FsStats{}, fmt.Errorf("volume %s is not published at %s: %w", id, p, ports.ErrNotFound)
		}
	}
	return n.mount.Stats(p)
}

// Expand grows the volume to fit want (when given and larger than it is;
// a ZFS filesystem grows with its quota, online) and reports its size.
// After a controller expansion there is nothing left to grow.
func (n *Service) Expand(ctx context.Context, volumeID, p string, want *volume.CapacityRange) (int64, error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return 0, err
	}
	if err := volume.CheckPath("volume_path", p); err != nil {
		return 0, err
	}
	size := int64(0)
	if want != nil {
		if size, err = want.Choose(); err != nil {
			return 0, err
		}
	}
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return 0, fmt.Errorf("expand volume %s: %w", id, refusal.ErrPending)
	}
	defer unlock()
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return 0, err
	}
	if err := n.volumePath(id, info, p); err != nil {
		return 0, err
	}
	if size > 0 && n.repl != nil && n.repl.Sizes != nil {
		// Recorded first, so that every copy grows with this one: a
		// retry after a failure in between records nothing new and
		// grows this copy.
		if err := n.repl.Sizes.RecordCapacity(ctx, id, size); err != nil && !errors.Is(err, ports.ErrNotFound) {
			return 0, fmt.Errorf("expand volume %s: recording its size for every copy: %w", id, err)
		}
	}
	if want == nil || info.CapacityBytes >= size {
		return info.CapacityBytes, nil
	}
	if err := n.store.Resize(ctx, id, size); err != nil {
		return 0, err
	}
	n.log.Info("volume expanded on the node", zap.String("volume", string(id)), zap.Int64("from", info.CapacityBytes), zap.Int64("bytes", size))
	return size, nil
}

// loadKey ensures, for a Ferry-encrypted volume, that its key is loaded
// and its filesystem mounted, with the key of the node-publish Secret,
// before anything else changes (volume.KeyToLoad: a missing or malformed
// key is InvalidArgument, also when the key is loaded already; a volume
// whose encryption Ferry does not manage is refused). The store checks
// the key every time (`zfs load-key -n`), before loading it when it is
// not loaded, and mounts the filesystem when it is not mounted: a wrong
// key answers ErrKeyRejected (raised as a KeyRejected event) with nothing
// loaded, mounted or promoted. encrypted says the volume is
// Ferry-encrypted; loaded, that this call loaded its key.
func (n *Service) loadKey(ctx context.Context, id volume.ID, info ports.VolumeInfo, secrets map[string]string, log *zap.Logger) (encrypted, loaded bool, err error) {
	v, err := volume.KeyToLoad(info.Metadata[ports.MetaEncryption], info.Encryption, secrets)
	if err != nil {
		if errors.Is(err, volume.ErrNotFerrysKey) {
			log.Error("publish refused: encryption not managed by Ferry", zap.Error(err))
			return false, false, fmt.Errorf("volume %s: %v: %w", id, err, refusal.ErrPrecondition)
		}
		return false, false, err
	}
	if !v.Needed {
		return false, false, nil
	}
	if err := n.store.LoadKey(ctx, id, v.Key); err != nil {
		if errors.Is(err, ports.ErrKeyRejected) && n.repl != nil && n.repl.Events != nil {
			n.repl.Events.Record(ctx, id, ports.Event{Type: ports.EventWarning, Reason: "KeyRejected",
				Message: fmt.Sprintf("the key in the node-publish Secret is not volume %s's key: nothing was loaded, mounted or promoted on %s", id, n.cfg.Node)})
		}
		return true, false, err
	}
	if info.Encryption.KeyLoaded {
		log.Info("encryption key checked; filesystem mounted")
		return true, false, nil
	}
	log.Info("encryption key loaded")
	return true, true, nil
}

// datasetMounted checks that the volume's dataset is mounted at its own
// mountpoint (the mount table lists it there): an encrypted dataset may
// be unmounted, and its bare mountpoint directory is never what a pod
// gets. ErrPrecondition otherwise: nothing is bound.
func (n *Service) datasetMounted(info ports.VolumeInfo) error {
	mounts, err := n.mount.MountsOf(info.MountSource)
	if err != nil {
		return fmt.Errorf("checking that %s is mounted at %s: %w", info.MountSource, info.MountPath, err)
	}
	for _, m := range mounts {
		if m == path.Clean(info.MountPath) {
			return nil
		}
	}
	return fmt.Errorf("the encrypted dataset %s is not mounted at %s: nothing bound: %w", info.MountSource, info.MountPath, refusal.ErrPrecondition)
}

// unloadKey unloads an encrypted volume's key, best effort: a failure is
// logged (the key stays loaded on this node until it reboots or a later
// unpublish unloads it), never the publish's or unpublish's error.
func (n *Service) unloadKey(ctx context.Context, id volume.ID, log *zap.Logger) {
	if err := n.store.UnloadKey(context.WithoutCancel(ctx), id); err != nil {
		log.Warn("encryption key not unloaded: it stays loaded on this node", zap.Error(err))
		return
	}
	log.Info("encryption key unloaded")
}

// unloadKeyIfLast unloads the key of a volume Ferry encrypted once no
// target on this node shows it any more: the node keeps only ciphertext
// when it no longer serves the volume (after the release of its primary
// term, for a replicated volume).
func (n *Service) unloadKeyIfLast(ctx context.Context, id volume.ID, info ports.VolumeInfo, log *zap.Logger) {
	// Only a Ferry-encrypted volume's key (the one DecideSend sends raw):
	// a key Ferry did not set is never unloaded by it.
	if v, err := volume.DecideSend(info.Metadata[ports.MetaEncryption], info.Encryption); err != nil || !v.Raw || !info.Encryption.KeyLoaded {
		return
	}
	mounts, err := n.mount.MountsOf(info.MountSource)
	if err != nil {
		log.Warn("encryption key not unloaded: the mount table could not be read", zap.Error(err))
		return
	}
	for _, m := range mounts {
		if m != path.Clean(info.MountPath) {
			return // still published here
		}
	}
	n.unloadKey(ctx, id, log)
}
