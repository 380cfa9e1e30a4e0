package zfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ferry-csi/ferry/domain/replica"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Resumable transfers, OpenZFS only: a receive run with `zfs recv -s` that
// is interrupted keeps what arrived and records a receive_resume_token on
// the target; the sender continues with `zfs send -t <token>`. zfs-fuse
// knows neither, so there a failed transfer restarts from the last complete
// snapshot.

// detectResume asks the pool for the receive_resume_token property: it
// exists on OpenZFS and is refused as an invalid property by zfs-fuse.
func (s *Store) detectResume(ctx context.Context) bool {
	_, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "receive_resume_token", s.root)
	return err == nil
}

// staging is where a full stream is received before it is renamed into
// place; a leading '_' is never a volume ID.
func (s *Store) staging(id volume.ID) string {
	return s.root + "/_incoming-" + volume.Digest(string(id))
}

// token reads a dataset's receive_resume_token ("" when none, when the
// dataset does not exist, or when the pool cannot resume).
func (s *Store) token(ctx context.Context, dataset string) (string, error) {
	if !s.resumable {
		return "", nil
	}
	out, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "receive_resume_token", dataset)
	if errors.Is(err, ports.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(out))
	if v == "-" {
		return "", nil
	}
	return v, nil
}

// ResumeToken returns the token of an interrupted receive of the volume:
// into the volume itself (an incremental) or into its staging (a full
// stream).
func (s *Store) ResumeToken(ctx context.Context, id volume.ID) (string, error) {
	if !s.resumable {
		return "", nil
	}
	if _, err := s.GetVolume(ctx, id); err == nil {
		return s.token(ctx, s.dataset(id))
	} else if !errors.Is(err, ports.ErrNotFound) {
		return "", err
	}
	return s.token(ctx, s.staging(id))
}

// DiscardPartial aborts an interrupted receive (`zfs recv -A`): of an
// incremental into the volume, or of a full stream, whose staging dataset
// is destroyed.
func (s *Store) DiscardPartial(ctx context.Context, id volume.ID) error {
	if !s.resumable {
		return nil
	}
	_, err := s.GetVolume(ctx, id)
	switch {
	case err == nil:
		if t, _ := s.token(ctx, s.dataset(id)); t == "" {
			return nil
		}
		_, err := s.run.zfs(ctx, "recv", "-A", s.dataset(id))
		return err
	case !errors.Is(err, ports.ErrNotFound):
		return err // not known to be missing (a stuck pool): nothing destroyed
	}
	return s.destroyIfExists(ctx, s.staging(id))
}

// resumeSend continues an interrupted transfer. The token comes from a
// peer, so it is checked first: `zfs send -nvt` decodes it, and the
// snapshot it names must be a replication snapshot of this volume. It may
// be older than req.To (the receiver was interrupted on an earlier
// target): finishing it still moves the receiver forward. A token that
// cannot be decoded or names anything else is ErrInvalid, which makes the
// receiver discard its partial state.
//
// `zfs send -t` resumes with the flags the token recorded: a token must be
// raw exactly when the volume is sent raw (v), or the rest of the stream
// would be decrypted (or a plaintext volume's sent raw).
func (s *Store) resumeSend(ctx context.Context, req ports.SendRequest, v volume.SendVerdict) (io.ReadCloser, error) {
	if !s.resumable {
		return nil, fmt.Errorf("send %s: this pool cannot resume transfers: %w", req.Volume, ports.ErrInvalid)
	}
	out, err := s.run.zfs(ctx, "send", "-n", "-v", "-t", req.ResumeToken)
	if err != nil {
		return nil, fmt.Errorf("send %s: resume token: %v: %w", req.Volume, err, ports.ErrInvalid)
	}
	target := tokenTarget(string(out))
	ds, snap, ok := strings.Cut(target, "@")
	if _, _, isReplication := replica.ParseSnapshotName(snap); !ok || ds != s.dataset(req.Volume) || !isReplication {
		return nil, fmt.Errorf("send %s: resume token names %q, not a replication snapshot of %s: %w", req.Volume, target, s.dataset(req.Volume), ports.ErrInvalid)
	}
	if raw := tokenRaw(string(out)); raw != v.Raw {
		return nil, fmt.Errorf("send %s: resume token of a stream with raw %v, the volume is sent with raw %v: %w", req.Volume, raw, v.Raw, ports.ErrInvalid)
	}
	return s.run.stream(ctx, "send", "-t", req.ResumeToken)
}

// tokenTarget finds "toname = pool/fs@snap" in `zfs send -nvt` output.
func tokenTarget(out string) string {
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && strings.TrimSpace(k) == "toname" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
