package app

import (
	"context"
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Node implements the CSI node's use cases: making a local volume appear in
// a pod's directory and reporting on it.
type Node struct {
	cfg   Config
	store ports.SnapshotStore
	mount ports.Mounter
	locks *Locks
	log   *zap.Logger
}

// NewNode returns the node use cases.
func NewNode(cfg Config, store ports.SnapshotStore, mount ports.Mounter, log *zap.Logger) *Node {
	return &Node{cfg: cfg, store: store, mount: mount, locks: NewLocks(), log: log}
}

// NodeID is the node's CSI node_id.
func (n *Node) NodeID() replica.Node { return n.cfg.Node }

// PublishRequest is a NodePublishVolume call.
type PublishRequest struct {
	VolumeID   string
	TargetPath string
	ReadOnly   bool
	Capability volume.Capability
}

// Publish bind-mounts the volume's dataset at the target path, read-only
// when asked (or when the access mode never writes). Publishing the same
// volume at the same target the same way again succeeds; a target holding
// something else, or this volume with the other read-only flag, answers
// ErrIncompatible.
func (n *Node) Publish(ctx context.Context, req PublishRequest) error {
	id, err := volume.ParseID("volume_id", req.VolumeID)
	if err != nil {
		return err
	}
	target, err := checkTarget(req.TargetPath)
	if err != nil {
		return err
	}
	if ok, why := req.Capability.Supported(); !ok {
		return fmt.Errorf("%s: %w", why, ErrUnsupported)
	}
	readOnly := req.ReadOnly || req.Capability.Mode.ReadOnly()
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return fmt.Errorf("publish volume %s: %w", id, ErrPending)
	}
	defer unlock()
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	log := n.log.With(zap.String("volume", string(id)), zap.String("target", target))
	m, mounted, err := n.mount.MountAt(target)
	if err != nil {
		return err
	}
	if mounted {
		if m.Source == info.MountSource && m.ReadOnly == readOnly {
			return nil
		}
		return fmt.Errorf("target %s already holds %s (read-only %v): %w", target, m.Source, m.ReadOnly, ErrIncompatible)
	}
	log.Info("publishing volume", zap.Bool("readOnly", readOnly))
	if err := n.mount.BindMount(ctx, info.MountPath, target, readOnly); err != nil {
		return err
	}
	log.Info("volume published", zap.Bool("readOnly", readOnly))
	return nil
}

// Unpublish unmounts the volume from the target path and removes the
// directory. A target that is not mounted is already unpublished.
func (n *Node) Unpublish(ctx context.Context, volumeID, targetPath string) error {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return err
	}
	target, err := checkTarget(targetPath)
	if err != nil {
		return err
	}
	unlock, ok := n.locks.TryLock("volume/" + string(id))
	if !ok {
		return fmt.Errorf("unpublish volume %s: %w", id, ErrPending)
	}
	defer unlock()
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return err // NotFound included: never unmount on a guess
	}
	m, mounted, err := n.mount.MountAt(target)
	if err != nil {
		return err
	}
	if mounted && m.Source != info.MountSource {
		// Something else is mounted there: this volume is not published at
		// target, which is what the caller wants; leave the other alone.
		n.log.Warn("target holds another filesystem: not unmounting it", zap.String("volume", string(id)),
			zap.String("target", target), zap.String("source", m.Source))
		return nil
	}
	if err := n.mount.Unmount(ctx, target); err != nil {
		return err
	}
	n.log.Info("volume unpublished", zap.String("volume", string(id)), zap.String("target", target))
	return nil
}

// Stats reports usage of a published volume at path.
func (n *Node) Stats(ctx context.Context, volumeID, path string) (ports.FsStats, error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return ports.FsStats{}, err
	}
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return ports.FsStats{}, err
	}
	p, err := checkTarget(path)
	if err != nil {
		// No volume is published at a path that is not absolute.
		return ports.FsStats{}, fmt.Errorf("volume %s at %q: %v: %w", id, path, err, ports.ErrNotFound)
	}
	if p != filepath.Clean(info.MountPath) {
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

// Expand reports the volume's size after a controller expansion: a ZFS
// filesystem grows with its quota, nothing is left to do on the node.
func (n *Node) Expand(ctx context.Context, volumeID, path string) (int64, error) {
	id, err := volume.ParseID("volume_id", volumeID)
	if err != nil {
		return 0, err
	}
	info, err := n.store.GetVolume(ctx, id)
	if err != nil {
		return 0, err
	}
	if _, err := checkTarget(path); err != nil {
		return 0, fmt.Errorf("volume %s at %q: %v: %w", id, path, err, ports.ErrNotFound)
	}
	return info.CapacityBytes, nil
}

// checkTarget accepts absolute paths only, cleaned; kubelet always sends
// one, so anything else is a mistake or an attack.
func checkTarget(p string) (string, error) {
	switch {
	case p == "":
		return "", &volume.InvalidError{Field: "target_path", Reason: "must not be empty"}
	case !filepath.IsAbs(p):
		return "", &volume.InvalidError{Field: "target_path", Value: p, Reason: "must be an absolute path"}
	case len(p) > 4096:
		return "", &volume.InvalidError{Field: "target_path", Value: p[:64], Reason: "longer than 4096 bytes"}
	}
	return filepath.Clean(p), nil
}
