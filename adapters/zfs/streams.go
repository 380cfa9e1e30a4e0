package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Send starts `zfs send [-i from] to` and returns its stdout. The stream
// fails (never ends cleanly) if zfs send fails.
func (s *Store) Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error) {
	if _, err := s.GetVolume(ctx, req.Volume); err != nil {
		return nil, err
	}
	// Check the snapshots first: zfs send reports a missing one only after
	// the caller started reading.
	for _, name := range []string{req.From, req.To} {
		if name == "" {
			continue
		}
		if _, err := s.get(ctx, false, s.snapshot(req.Volume, name)); err != nil {
			return nil, fmt.Errorf("send %s: %w", req.Volume, err)
		}
	}
	args := []string{"send"}
	if req.From != "" {
		args = append(args, "-i", s.snapshot(req.Volume, req.From))
	}
	args = append(args, s.snapshot(req.Volume, req.To))
	return s.run.stream(ctx, args...)
}

// Receive runs `zfs recv` (never -F) with the stream as stdin. A full
// stream creates the dataset; Ferry marks it as its own at once.
func (s *Store) Receive(ctx context.Context, id volume.ID, stream io.Reader) error {
	_, err := s.GetVolume(ctx, id)
	existed := err == nil
	if err != nil && !errors.Is(err, ports.ErrNotFound) {
		return err // never receive into a dataset Ferry does not own
	}
	var stderr bytes.Buffer
	args := []string{"recv", s.dataset(id)}
	cmd := s.run.command(ctx, s.run.zfsBin, args...)
	cmd.Stdin, cmd.Stderr = stream, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("receive %s: %w", id, s.run.fail(ctx, s.run.zfsBin, args, stderr.String(), err))
	}
	if !existed {
		if err := s.setMeta(s.dataset(id), map[string]string{ports.MetaDriver: s.cfg.Driver, ports.MetaVolume: string(id)}); err != nil {
			return err
		}
	}
	return nil
}
