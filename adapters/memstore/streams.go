package memstore

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"os"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// stream is what Send writes: the target snapshot whole, and the GUID of
// the base an incremental stream applies to.
type stream struct {
	BaseGUID uint64 // 0: full stream
	Name     string
	GUID     uint64
	Created  int64
	Files    map[string][]byte
}

func (s *Store) Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.lookup(req.Volume)
	if err != nil {
		return nil, err
	}
	if req.ResumeToken != "" {
		return nil, fmt.Errorf("send %s: this store cannot resume transfers: %w", req.Volume, ports.ErrInvalid)
	}
	to := v.find(req.To)
	if to < 0 {
		return nil, fmt.Errorf("send %s@%s: %w", req.Volume, req.To, ports.ErrNotFound)
	}
	// Like zfs send without -p, a stream carries no metadata.
	st := stream{Name: req.To, GUID: v.snaps[to].guid, Created: v.snaps[to].created.Unix(), Files: v.snaps[to].files}
	if req.From != "" {
		from := v.find(req.From)
		if from < 0 {
			return nil, fmt.Errorf("send %s@%s: %w", req.Volume, req.From, ports.ErrNotFound)
		}
		if from >= to {
			return nil, fmt.Errorf("send %s: %s is not older than %s: %w", req.Volume, req.From, req.To, ports.ErrInvalid)
		}
		st.BaseGUID = v.snaps[from].guid
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

func (s *Store) Receive(ctx context.Context, id volume.ID, r io.Reader) error {
	var st stream
	if err := gob.NewDecoder(r).Decode(&st); err != nil {
		return fmt.Errorf("receive %s: malformed stream: %v: %w", id, err, ports.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, exists := s.volumes[id]
	switch {
	case st.BaseGUID == 0 && exists:
		return fmt.Errorf("receive %s: full stream into an existing volume: %w", id, ports.ErrExists)
	case st.BaseGUID != 0 && !exists:
		return fmt.Errorf("receive %s: incremental stream without its base: %w", id, ports.ErrBaseMismatch)
	case st.BaseGUID != 0:
		if len(v.snaps) == 0 || v.snaps[len(v.snaps)-1].guid != st.BaseGUID {
			return fmt.Errorf("receive %s: newest snapshot does not match the incremental source: %w", id, ports.ErrBaseMismatch)
		}
		cur, err := readFiles(s.path(id))
		if err != nil {
			return err
		}
		if !cur.equal(v.snaps[len(v.snaps)-1].files) {
			return fmt.Errorf("receive %s: destination has been modified since its newest snapshot: %w", id, ports.ErrConflict)
		}
		if v.find(st.Name) >= 0 {
			return fmt.Errorf("receive %s@%s: %w", id, st.Name, ports.ErrExists)
		}
	default:
		if err := os.MkdirAll(s.path(id), 0o755); err != nil {
			return err
		}
		v = &vol{id: id, props: map[string]string{}, meta: map[string]string{ports.MetaVolume: string(id)}}
		s.volumes[id] = v
	}
	if err := files(st.Files).writeTo(s.path(id)); err != nil {
		return err
	}
	txg := s.nextTxg()
	v.snaps = append(v.snaps, &snap{name: st.Name, guid: st.GUID, txg: txg, created: timeUnix(st.Created), meta: map[string]string{}, files: st.Files})
	return nil
}

// ResumeToken: the in-memory store never keeps an interrupted receive (like
// zfs-fuse), so transfers restart from the last complete snapshot.
func (s *Store) ResumeToken(ctx context.Context, id volume.ID) (string, error) { return "", nil }

// DiscardPartial has nothing to discard.
func (s *Store) DiscardPartial(ctx context.Context, id volume.ID) error { return nil }

// ReceiveReplacement decodes a whole full stream before anything changes,
// then commits, then swaps the volume's files and snapshots for the
// stream's, keeping the old volume's metadata and properties.
func (s *Store) ReceiveReplacement(ctx context.Context, id volume.ID, r io.Reader, commit func(context.Context) error) error {
	var st stream
	if err := gob.NewDecoder(r).Decode(&st); err != nil {
		return fmt.Errorf("receive %s: malformed stream: %v: %w", id, err, ports.ErrInvalid)
	}
	if st.BaseGUID != 0 {
		return fmt.Errorf("receive %s: a replacement needs a full stream: %w", id, ports.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := commit(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.volumes[id]
	v := &vol{id: id, props: map[string]string{}, meta: map[string]string{ports.MetaVolume: string(id)}}
	if exists {
		v.props, v.meta, v.capacity = old.props, old.meta, old.capacity
	}
	if err := os.RemoveAll(s.path(id)); err != nil {
		return err
	}
	if err := os.MkdirAll(s.path(id), 0o755); err != nil {
		return err
	}
	if err := files(st.Files).writeTo(s.path(id)); err != nil {
		return err
	}
	v.snaps = []*snap{{name: st.Name, guid: st.GUID, txg: s.nextTxg(), created: timeUnix(st.Created), meta: map[string]string{}, files: st.Files}}
	s.volumes[id] = v
	return nil
}
