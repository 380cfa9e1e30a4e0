package memstore

import (
	"context"
	"fmt"
	"sort"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

func (s *Store) CreateSnapshot(ctx context.Context, id volume.ID, name string, metadata map[string]string) (ports.SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(id)
	if err != nil {
		return ports.SnapshotInfo{}, err
	}
	if v.find(name) >= 0 {
		return ports.SnapshotInfo{}, fmt.Errorf("snapshot %s@%s: %w", id, name, ports.ErrExists)
	}
	fs, err := readFiles(s.path(id))
	if err != nil {
		return ports.SnapshotInfo{}, err
	}
	txg := s.nextTxg()
	sn := &snap{name: name, guid: s.guidSeed + txg, txg: txg, created: s.now().UTC().Truncate(1e9), meta: copyMap(metadata), files: fs}
	v.snaps = append(v.snaps, sn)
	return snapInfo(id, sn), nil
}

func (v *vol) find(name string) int {
	for i, sn := range v.snaps {
		if sn.name == name {
			return i
		}
	}
	return -1
}

func snapInfo(id volume.ID, sn *snap) ports.SnapshotInfo {
	return ports.SnapshotInfo{Volume: id, Name: sn.name, GUID: sn.guid, CreateTxg: sn.txg, CreatedAt: sn.created, SizeBytes: sn.files.size(), Metadata: copyMap(sn.meta)}
}

func (s *Store) ListSnapshots(ctx context.Context, id volume.ID) ([]ports.SnapshotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var vols []*vol
	if id != "" {
		v, err := s.lookup(id)
		if err != nil {
			return nil, err
		}
		vols = []*vol{v}
	} else {
		for _, v := range s.volumes {
			vols = append(vols, v)
		}
		sort.Slice(vols, func(i, j int) bool { return vols[i].id < vols[j].id })
	}
	var out []ports.SnapshotInfo
	for _, v := range vols {
		for _, sn := range v.snaps {
			out = append(out, snapInfo(v.id, sn))
		}
	}
	return out, nil
}

// lookupSnapshot finds a volume and the index of one of its snapshots;
// the caller holds s.mu.
func (s *Store) lookupSnapshot(id volume.ID, name string) (*vol, int, error) {
	v, err := s.lookup(id)
	if err != nil {
		return nil, -1, err
	}
	i := v.find(name)
	if i < 0 {
		return nil, -1, fmt.Errorf("snapshot %s@%s: %w", id, name, ports.ErrNotFound)
	}
	return v, i, nil
}

func (s *Store) SetSnapshotMetadata(ctx context.Context, id volume.ID, name string, metadata map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, i, err := s.lookupSnapshot(id, name)
	if err != nil {
		return err
	}
	for k, val := range metadata {
		v.snaps[i].meta[k] = val
	}
	return nil
}

func (s *Store) DestroySnapshot(ctx context.Context, id volume.ID, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, i, err := s.lookupSnapshot(id, name)
	if err != nil {
		return err
	}
	v.snaps = append(v.snaps[:i], v.snaps[i+1:]...)
	return nil
}

func (s *Store) Rollback(ctx context.Context, id volume.ID, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, i, err := s.lookupSnapshot(id, name)
	if err != nil {
		return err
	}
	if err := v.snaps[i].files.writeTo(s.path(id)); err != nil {
		return err
	}
	v.snaps = v.snaps[:i+1]
	return nil
}
