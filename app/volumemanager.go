package app

import (
	"context"
	"errors"
	"strconv"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// VolumeManager manages one replica of one volume on this node. In this
// stage it reads what the node holds; catching up from peers, periodic
// snapshots and the safe-deletion protocol arrive with the replication
// data plane.
type VolumeManager struct {
	cfg    Config
	volume volume.ID
	store  ports.SnapshotStore
}

// NewVolumeManager returns the manager of volume id's local replica.
func NewVolumeManager(cfg Config, id volume.ID, store ports.SnapshotStore) *VolumeManager {
	return &VolumeManager{cfg: cfg, volume: id, store: store}
}

// LocalReplica reads the local replica's state from the store: its newest
// replication snapshot and that snapshot's epoch, or snapshot 0 when the
// node holds no data for the volume.
func (m *VolumeManager) LocalReplica(ctx context.Context) (replica.Replica, error) {
	r := replica.Replica{Node: m.cfg.Node}
	snaps, err := m.store.ListSnapshots(ctx, m.volume)
	if errors.Is(err, ports.ErrNotFound) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	for _, s := range snaps {
		n, ok := replica.ParseSnapshotName(s.Name)
		if !ok || n < r.Snapshot {
			continue
		}
		r.Snapshot = n
		epoch, _ := strconv.ParseUint(s.Metadata[ports.MetaEpoch], 10, 64)
		r.SnapshotEpoch = replica.Epoch(epoch)
	}
	return r, nil
}
