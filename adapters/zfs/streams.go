package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// Send starts `zfs send [-w] [-i from] to` and returns its stdout. The
// stream fails (never ends cleanly) if zfs send fails. A volume Ferry
// encrypted is sent raw (-w), every stream of it; one the domain refuses
// to send (volume.DecideSend: its own encryption root without Ferry's
// record, a record the pool contradicts) is not sent at all; an ordinary
// volume (plaintext, or encrypted by its parent) is sent as on main.
func (s *Store) Send(ctx context.Context, req ports.SendRequest) (io.ReadCloser, error) {
	// One `zfs get` checks the dataset's ownership and that the snapshots
	// exist: zfs send reports a missing one only after the caller started
	// reading, and every CLI call costs milliseconds on a small incremental.
	targets := []string{s.dataset(req.Volume), s.snapshot(req.Volume, req.To)}
	if req.From != "" {
		targets = append(targets, s.snapshot(req.Volume, req.From))
	}
	check := func() (volume.SendVerdict, error) {
		rows, err := s.get(ctx, targets...)
		if err != nil {
			return volume.SendVerdict{}, fmt.Errorf("send %s: %w", req.Volume, err)
		}
		if len(rows) != len(targets) || rows[0].name != targets[0] || !s.owned(rows[0]) {
			return volume.SendVerdict{}, fmt.Errorf("send %s: dataset %s: %w", req.Volume, targets[0], ports.ErrNotOwned)
		}
		v, err := s.sendVerdict(rows[0])
		if err != nil {
			return volume.SendVerdict{}, fmt.Errorf("send %s: %w", req.Volume, err)
		}
		if v.Raw && req.PlaintextOnly {
			return volume.SendVerdict{}, fmt.Errorf("send %s: an encrypted volume is sent raw only, and the receiver (a peer of an older protocol) cannot take a raw stream: upgrade it: %w", req.Volume, ports.ErrRawUnsupported)
		}
		return v, nil
	}
	if req.ResumeToken != "" {
		v, err := check()
		if err != nil {
			return nil, err
		}
		s.remember(req.Volume, v)
		return s.resumeSend(ctx, req, v)
	}
	if s.encrypts && !s.knownPlain(req.Volume) {
		// Whether the stream is raw is known only once the dataset is
		// read: for a volume not yet known to be sent plain here, the
		// check comes first, and no plaintext send of an encrypted
		// dataset is ever started. Its verdict is kept: a volume's
		// encryption never changes after its creation.
		v, err := check()
		if err != nil {
			return nil, err
		}
		s.remember(req.Volume, v)
		return s.run.stream(ctx, sendArgs(req, v, s.features, s.snapshot)...)
	}
	// A volume known to be sent plain (every volume of a pool that cannot
	// encrypt, zfs-fuse; one checked before here), as on main: zfs send
	// starts while the check runs (it only reads), and its stream is
	// handed out only once the check passed: not one byte of a dataset
	// that is not Ferry's leaves, and a small incremental does not wait
	// for two commands one after the other.
	checked := make(chan error, 1)
	go func() {
		v, err := check()
		if err == nil && v.Raw {
			err = fmt.Errorf("send %s: the volume is sent raw, not as plaintext: %w", req.Volume, volume.ErrNotFerrysKey)
		}
		if err != nil {
			s.forget(req.Volume) // the next send checks first again
		}
		checked <- err
	}()
	r, err := s.run.stream(ctx, sendArgs(req, volume.SendVerdict{}, s.features, s.snapshot)...)
	if cerr := <-checked; cerr != nil {
		if r != nil {
			_ = r.Close() // kills zfs send
		}
		return nil, cerr
	}
	return r, err
}

// sendArgs is the argv of `zfs send` for req, raw as v says, with what
// both the pool (own) and the receiver (req.Accept) take beyond a plain
// stream.
func sendArgs(req ports.SendRequest, v volume.SendVerdict, own volume.StreamFeatures, snapshot func(volume.ID, string) string) []string {
	args := []string{"send"}
	if v.Raw {
		args = append(args, "-w")
	}
	args = append(args, featureFlags(volume.SendFeatures(own, req.Accept, v.Raw))...)
	if req.From != "" {
		args = append(args, "-i", snapshot(req.Volume, req.From))
	}
	return append(args, snapshot(req.Volume, req.To))
}

// Receive runs `zfs recv` (never -F) with the stream as stdin.
//
// An incremental stream applies to the existing, owned volume. A full
// stream is received into a staging dataset, "<parent>/_incoming-<digest>"
// (a leading '_' is never a volume ID, so the name is Ferry's by
// construction), marked as Ferry's, then renamed into place: a receive that
// fails or is killed never leaves an unmarked dataset where the volume
// belongs, and a staging dataset left by a crash is destroyed by the next
// attempt.
func (s *Store) Receive(ctx context.Context, id volume.ID, stream io.Reader) error {
	_, err := s.GetVolume(ctx, id)
	switch {
	case err == nil:
		return s.recvIncremental(ctx, id, stream)
	case !errors.Is(err, ports.ErrNotFound):
		return err // never receive into a dataset Ferry does not own
	}
	staging := s.staging(id)
	keep := false
	if token, _ := s.token(ctx, staging); token != "" {
		// A partial receive is kept for a resuming stream only: OpenZFS
		// refuses a fresh full stream into it ("contains partially-complete
		// state"), so for one it goes, as any other leftover.
		keep, stream = peekResuming(stream)
	}
	if !keep {
		if err := s.destroyIfExists(ctx, staging); err != nil {
			return fmt.Errorf("receive %s: clearing a staging dataset left by an earlier attempt: %w", id, err)
		}
	}
	tap := &headerTap{r: stream}
	if err := s.recv(ctx, id, staging, tap, true); err != nil {
		if token, _ := s.token(context.WithoutCancel(ctx), staging); token != "" {
			return fmt.Errorf("%w (kept to be resumed)", err)
		}
		if derr := s.destroyIfExists(context.WithoutCancel(ctx), staging); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the partial receive: %w", derr))
		}
		return err
	}
	meta := map[string]string{ports.MetaDriver: s.cfg.Driver, ports.MetaVolume: string(id)}
	rec, mount, err := s.receivedRecord(ctx, staging, tap.raw())
	if err != nil {
		if derr := s.destroyIfExists(context.WithoutCancel(ctx), staging); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the received copy: %w", derr))
		}
		return fmt.Errorf("receive %s: %w", id, err)
	}
	for k, v := range rec {
		meta[k] = v
	}
	if err := s.setMeta(staging, meta); err != nil {
		return err
	}
	return s.moveIntoPlace(ctx, id, staging, mount)
}

// ReceiveReplacement receives a full stream into the staging dataset while
// the volume stays as it is; once the stream is whole and commit agreed,
// the old dataset is destroyed and the staging one, marked as Ferry's with
// the old volume's metadata, renamed into place. A replacement is never
// resumed: a failed one is discarded whole.
func (s *Store) ReceiveReplacement(ctx context.Context, id volume.ID, stream io.Reader, commit func(context.Context) error) error {
	old, err := s.GetVolume(ctx, id)
	if errors.Is(err, ports.ErrNotFound) {
		if err := commit(ctx); err != nil {
			return err
		}
		return s.Receive(ctx, id, stream)
	}
	if err != nil {
		return err // never replace a dataset Ferry does not own
	}
	staging := s.staging(id)
	if err := s.destroyIfExists(ctx, staging); err != nil {
		return fmt.Errorf("receive %s: clearing a staging dataset left by an earlier attempt: %w", id, err)
	}
	discard := func(err error) error {
		if derr := s.destroyIfExists(context.WithoutCancel(ctx), staging); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the received copy: %w", derr))
		}
		return err
	}
	tap := &headerTap{r: stream}
	if err := s.recv(ctx, id, staging, tap, false); err != nil {
		return discard(err)
	}
	meta := map[string]string{}
	for k, v := range old.Metadata {
		meta[k] = v
	}
	meta[ports.MetaDriver], meta[ports.MetaVolume] = s.cfg.Driver, string(id)
	// The encryption record is the new stream's, not the old copy's.
	delete(meta, ports.MetaEncryption)
	rec, mount, err := s.receivedRecord(ctx, staging, tap.raw())
	if err != nil {
		return discard(fmt.Errorf("receive %s: %w", id, err))
	}
	for k, v := range rec {
		meta[k] = v
	}
	if err := s.setMeta(staging, meta); err != nil {
		return discard(err)
	}
	if err := commit(ctx); err != nil {
		return discard(err)
	}
	if err := s.destroyDataset(ctx, id); err != nil {
		return discard(fmt.Errorf("receive %s: destroying the copy being replaced: %w", id, err))
	}
	return s.moveIntoPlace(ctx, id, staging, mount)
}

// moveIntoPlace renames a complete, marked staging dataset to the volume's
// name and mounts it when mount says so (decided from the staging
// dataset before the rename: receivedRecord).
func (s *Store) moveIntoPlace(ctx context.Context, id volume.ID, staging string, mount bool) error {
	s.forget(id)
	// zfs-fuse refuses to rename a mounted dataset ("dataset is busy").
	err := retryBusy(ctx, func() error {
		if err := s.unmount(ctx, staging); err != nil {
			return err
		}
		_, err := s.run.zfs(ctx, "rename", staging, s.dataset(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("receive %s: moving the received dataset into place: %w", id, err)
	}
	if !mount {
		// A raw copy without its key stays unmounted: a secondary of an
		// encrypted volume holds ciphertext only.
		return nil
	}
	if _, err := s.run.zfs(ctx, "mount", s.dataset(id)); err != nil && !strings.Contains(err.Error(), "already mounted") {
		return fmt.Errorf("receive %s: mounting: %w", id, err)
	}
	return nil
}

// recvIncremental receives into the existing volume. zfs answers "has been
// modified" both when the volume changed since its newest snapshot and
// when the stream's base is not that snapshot (it has newer ones): the
// stream's header tells which, so that a stale plan is never mistaken for
// changes to discard.
func (s *Store) recvIncremental(ctx context.Context, id volume.ID, stream io.Reader) error {
	if token, _ := s.token(ctx, s.dataset(id)); token != "" {
		// As for a full stream: the partial incremental is kept only for
		// the stream that resumes it.
		var resuming bool
		if resuming, stream = peekResuming(stream); !resuming {
			if _, err := s.run.zfs(ctx, "recv", "-A", s.dataset(id)); err != nil {
				return fmt.Errorf("receive %s: discarding a partial receive for a fresh stream: %w", id, err)
			}
		}
	}
	tap := &headerTap{r: stream}
	err := s.recv(ctx, id, s.dataset(id), tap, true)
	if err == nil || !errors.Is(err, ports.ErrConflict) {
		return err
	}
	from, ok := tap.fromGUID()
	if !ok {
		return err
	}
	list, lerr := s.ListSnapshots(context.WithoutCancel(ctx), id)
	if lerr != nil || len(list) == 0 {
		return err
	}
	if newest := list[len(list)-1]; newest.GUID != from {
		return fmt.Errorf("receive %s: the stream's base (GUID %d) is not the newest snapshot %s: %w", id, from, newest.Name, ports.ErrBaseMismatch)
	}
	return err
}

// recv feeds stream to `zfs recv target` through a pipe of our own making
// (so that it can be enlarged). A stream that fails mid-way closes the pipe
// with its error: zfs recv sees a truncated stream and receives nothing,
// unless resumable (and the pool can resume): then what arrived is kept
// with a resume token. Receives that are never resumed (a replacement, a
// copy kept aside) pass false, so a kill mid-way leaves nothing behind.
func (s *Store) recv(ctx context.Context, id volume.ID, target string, stream io.Reader, resumable bool) error {
	var stderr bytes.Buffer
	args := []string{"recv", target}
	if resumable && s.resumable {
		args = []string{"recv", "-s", target} // an interrupted receive can be resumed
	}
	cmd := s.run.command(ctx, s.run.zfsBin, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	growPipe(pw)
	cmd.Stdin, cmd.Stderr = pr, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		s.run.done(s.run.zfsBin, args, start, err)
		return fmt.Errorf("receive %s: %w", id, err)
	}
	pr.Close() // the child holds its own copy
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(pw, stream)
		pw.Close()
		copied <- err
	}()
	werr := cmd.Wait()
	s.run.done(s.run.zfsBin, args, start, werr)
	pw.Close() // unblocks the copy if zfs recv exited early
	cerr := <-copied
	if werr != nil {
		if cerr != nil {
			werr = errors.Join(werr, fmt.Errorf("stream: %w", cerr))
		}
		return fmt.Errorf("receive %s: %w", id, s.run.fail(ctx, s.run.zfsBin, args, stderr.String(), werr))
	}
	// zfs recv succeeded: a stream checks itself (checksums, an end
	// record), so the snapshot is whole even if the transport reported an
	// error after its last byte.
	return nil
}

// destroyIfExists destroys a dataset of Ferry's own making (staging) and
// its snapshots; a missing one is fine.
func (s *Store) destroyIfExists(ctx context.Context, dataset string) error {
	if _, err := s.get(ctx, dataset); errors.Is(err, ports.ErrNotFound) {
		return nil
	}
	return retryBusy(ctx, func() error {
		if err := s.unmount(ctx, dataset); err != nil {
			return err
		}
		_, err := s.run.zfs(ctx, "destroy", "-r", dataset)
		return err
	})
}

// retryBusy runs fn until it does not fail with ErrBusy, for up to about a
// second: zfs-fuse answers "dataset is busy" for a moment after a dataset
// (or a bind mount of it) was unmounted.
func retryBusy(ctx context.Context, fn func() error) error {
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err = fn(); err == nil || !errors.Is(err, ports.ErrBusy) {
			return err
		}
	}
	return err
}
