package zfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// FencedHold is the tag of the hold on every copy kept aside: `zfs destroy`
// refuses the snapshot until `zfs release ferry-fenced` lifts it.
const FencedHold = "ferry-fenced"

// KeptRoot is the dataset under which copies are kept aside: beside the
// parent dataset, never under it ("<pool>/<parent>-fenced"; on a store
// that owns the whole pool, "<pool>/ferry-fenced"), so that no listing of
// volumes sees them and nothing Ferry destroys reaches them. It is not
// mounted (mountpoint=none, which the copies inherit).
func (s *Store) KeptRoot() string {
	if s.root == s.cfg.Pool {
		return s.cfg.Pool + "/ferry-fenced"
	}
	return s.root + "-fenced"
}

// KeepAside implements ports.SnapshotStore: it snapshots the volume as
// <vol>@<name>, copies that snapshot with a full `zfs send | zfs recv`
// (independent of the volume's later rollbacks and retention) into
// <KeptRoot>/<vol>-<name>, read-only and unmounted, holds the received
// snapshot (FencedHold), and destroys its snapshot on the volume again.
func (s *Store) KeepAside(ctx context.Context, id volume.ID, name string) (ports.KeptCopy, error) {
	info, err := s.GetVolume(ctx, id)
	if err != nil {
		return ports.KeptCopy{}, err
	}
	dest := s.KeptRoot() + "/" + string(id) + "-" + name
	snap := dest + "@" + name
	if len(snap) > 255 {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: %q is longer than ZFS's 255 bytes: %w", id, snap, ports.ErrInvalid)
	}
	temp := s.snapshot(id, name)
	if kept, err := s.kept(ctx, dest, snap); err == nil {
		// Made by an earlier call: its snapshot on the volume may be left.
		return kept, s.destroySnapshotIfExists(ctx, temp)
	}
	// A full copy needs what the volume references; the pool's free space
	// (outside every volume's reservation) must hold it.
	rows, err := s.get(ctx, s.cfg.Pool)
	if err != nil {
		return ports.KeptCopy{}, err
	}
	if avail := rows[0].int64("available"); info.UsedBytes > avail {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: a copy needs %d bytes, the pool has %d: %w", id, info.UsedBytes, avail, ports.ErrNoSpace)
	}
	if _, err := s.run.zfs(ctx, "create", "-p", "-o", "mountpoint=none", s.KeptRoot()); err != nil && !errors.Is(err, ports.ErrExists) {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: %s: %w", id, s.KeptRoot(), err)
	}
	// Whatever an interrupted attempt left goes: the copy is made again
	// from the volume as it is now.
	if err := s.destroyIfExists(ctx, dest); err != nil {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: clearing an earlier attempt: %w", id, err)
	}
	if err := s.destroySnapshotIfExists(ctx, temp); err != nil {
		return ports.KeptCopy{}, err
	}
	if _, err := s.run.zfs(ctx, "snapshot", temp); err != nil {
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: %w", id, err)
	}
	fail := func(err error) (ports.KeptCopy, error) {
		cctx := context.WithoutCancel(ctx)
		if derr := s.destroyIfExists(cctx, dest); derr != nil {
			err = errors.Join(err, derr)
		}
		if derr := s.destroySnapshotIfExists(cctx, temp); derr != nil {
			err = errors.Join(err, derr)
		}
		return ports.KeptCopy{}, fmt.Errorf("keep %s aside: %w", id, err)
	}
	// A volume Ferry encrypted is kept aside raw, as it is sent: the
	// copy stays ciphertext, its key the volume's.
	v, err := volume.DecideSend(info.Metadata[ports.MetaEncryption], info.Encryption)
	if err != nil {
		return fail(err)
	}
	args := []string{"send", temp}
	if v.Raw {
		args = []string{"send", "-w", temp}
	}
	stream, err := s.run.stream(ctx, args...)
	if err != nil {
		return fail(err)
	}
	err = s.recv(ctx, id, dest, stream, false)
	_ = stream.Close()
	if err != nil {
		return fail(err)
	}
	if _, err := s.run.zfs(ctx, "set", "readonly=on", dest); err != nil {
		return fail(err)
	}
	if _, err := s.run.zfs(ctx, "hold", FencedHold, snap); err != nil && !errors.Is(err, ports.ErrExists) {
		return fail(err)
	}
	if err := s.destroySnapshotIfExists(ctx, temp); err != nil {
		return ports.KeptCopy{}, err
	}
	return s.kept(ctx, dest, snap)
}

// kept describes a copy kept aside, once complete: its snapshot exists
// (a receive creates it last) and is held.
func (s *Store) kept(ctx context.Context, dest, snap string) (ports.KeptCopy, error) {
	rows, err := s.get(ctx, snap)
	if err != nil {
		return ports.KeptCopy{}, err
	}
	if _, err := s.run.zfs(ctx, "hold", FencedHold, snap); err != nil && !errors.Is(err, ports.ErrExists) {
		return ports.KeptCopy{}, err
	}
	return s.keptCopy(dest, snap, rows[0]), nil
}

// keptCopy describes the copy kept aside in dest, whose snapshot snap's
// properties row holds.
func (s *Store) keptCopy(dest, snap string, row *propRow) ports.KeptCopy {
	c := ports.KeptCopy{
		Name:      snap,
		Inspect:   fmt.Sprintf("zfs set mountpoint=<dir> %s (read-only)", dest),
		Drop:      fmt.Sprintf("zfs release %s %s; zfs destroy -r %s", FencedHold, snap, dest),
		SizeBytes: row.int64("referenced"),
		Root:      s.KeptRoot(),
	}
	// <KeptRoot>/<volume>-<name>@<name>
	if _, name, ok := strings.Cut(snap, "@"); ok {
		c.Volume = volume.ID(strings.TrimSuffix(strings.TrimPrefix(dest, s.KeptRoot()+"/"), "-"+name))
	}
	if t := row.int64("creation"); t > 0 {
		c.Taken = time.Unix(t, 0).UTC()
	}
	return c
}

var _ ports.KeptCopies = (*Store)(nil)

// ListKept implements ports.KeptCopies: the held snapshots of the datasets
// directly below KeptRoot (a copy whose keeping was interrupted, with no
// snapshot yet, is not one: KeepAside makes it again).
func (s *Store) ListKept(ctx context.Context) ([]ports.KeptCopy, error) {
	rows, err := s.getDepth(ctx, 2, s.KeptRoot())
	if errors.Is(err, ports.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ports.KeptCopy
	for _, row := range rows {
		dest, _, isSnap := strings.Cut(row.name, "@")
		if !isSnap || path.Dir(dest) != s.KeptRoot() {
			continue
		}
		out = append(out, s.keptCopy(dest, row.name, row))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// destroySnapshotIfExists destroys one snapshot; a missing one is fine.
func (s *Store) destroySnapshotIfExists(ctx context.Context, snap string) error {
	if _, err := s.run.zfs(ctx, "destroy", snap); err != nil && !errors.Is(err, ports.ErrNotFound) {
		return fmt.Errorf("destroying %s: %w", snap, err)
	}
	return nil
}
