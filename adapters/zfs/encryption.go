package zfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// ZFS native encryption, OpenZFS only. The rules (what is sent raw, what
// a received copy records, when a key is loaded) are the domain's
// (domain/volume/encryption.go); this file reads what the pool says and
// carries them out. Keys reach zfs only on its standard input
// (keylocation=prompt, `load-key -L prompt`): never in an argument, a
// file or the environment, where another process of the node could read
// them (/proc/<pid>/cmdline, environ).

// encryptionProps are read with every `zfs get` where the pool can
// encrypt; zfs-fuse refuses the whole listing if one is asked.
var encryptionProps = []string{"encryption", "encryptionroot", "keystatus", "keyformat"}

// featureRaw (DMU_BACKUP_FEATURE_RAW) marks a raw stream (`zfs send -w`)
// in its DRR_BEGIN record: the blocks as stored, encrypted.
const featureRaw = 1 << 24

// detectEncryption asks whether the pool has OpenZFS's encryption feature
// enabled (or active). zfs-fuse knows no `encryption` property and
// answers "bad property list: invalid property": only that means "cannot
// encrypt"; a pool created with the feature disabled answers "disabled".
// Any other failure (zfs or zpool not answering, the pool gone) is an
// error: Open fails rather than guess the mode.
func (s *Store) detectEncryption(ctx context.Context) (bool, error) {
	// The property first: zfs-fuse refuses it, and is never asked about
	// a feature it does not know.
	if _, err := s.run.zfs(ctx, "get", "-H", "-o", "value", "encryption", s.root); err != nil {
		var ce *CommandError
		if errors.As(err, &ce) && (strings.Contains(ce.Stderr, "bad property list") || strings.Contains(ce.Stderr, "invalid property")) {
			return false, nil
		}
		return false, fmt.Errorf("detecting whether pool %s can encrypt (zfs get encryption %s): %w", s.cfg.Pool, s.root, err)
	}
	out, err := s.run.zpool(ctx, "get", "-H", "-o", "value", "feature@encryption", s.cfg.Pool)
	if err != nil {
		return false, fmt.Errorf("detecting whether pool %s can encrypt (zpool get feature@encryption): %w", s.cfg.Pool, err)
	}
	v := strings.TrimSpace(string(out))
	return v == "enabled" || v == "active", nil
}

// CanEncrypt reports whether the store's pool can hold encrypted volumes
// (OpenZFS with the encryption feature); zfs-fuse cannot.
func (s *Store) CanEncrypt() bool { return s.encrypts }

// listProps is the -o property list of every `zfs get` of this store.
func (s *Store) listProps() string {
	if s.encrypts {
		props := append([]string{}, encryptionProps...)
		for _, k := range ports.EncryptionMetadataKeys {
			props = append(props, userPropPrefix+k)
		}
		return propList + "," + strings.Join(props, ",")
	}
	return propList
}

// stored is what the pool says of row's encryption. A pool that cannot
// encrypt holds nothing encrypted; one that can but printed no value
// leaves it unknown (the domain then refuses what it would have allowed).
func (s *Store) stored(row *propRow) volume.Stored {
	if !s.encrypts {
		return volume.Stored{Known: true, Cipher: "off", KeyFormat: "none"}
	}
	cipher := row.native["encryption"]
	if cipher == "" || cipher == "-" {
		return volume.Stored{}
	}
	return volume.Stored{
		Known:     true,
		Cipher:    cipher,
		OwnRoot:   cipher != "off" && row.native["encryptionroot"] == row.name,
		KeyFormat: volume.KeyFormat(row.native["keyformat"]),
		KeyLoaded: row.native["keystatus"] == "available",
	}
}

// encryptionArgs are the -o options that make a new dataset its own
// encryption root with a key given on stdin, and Ferry's record of it.
func (s *Store) encryptionArgs(e volume.Encryption) ([]string, error) {
	if !e.On() {
		return nil, nil
	}
	if !s.encrypts {
		return nil, fmt.Errorf("pool %s cannot encrypt (OpenZFS's encryption feature is absent or disabled; zfs-fuse has none): an encrypted StorageClass needs an OpenZFS pool with feature@encryption enabled: %w", s.cfg.Pool, volume.ErrUnsupported)
	}
	return []string{
		"-o", "encryption=" + e.Cipher,
		"-o", "keyformat=" + string(e.KeyFormat),
		"-o", "keylocation=prompt",
		"-o", userPropPrefix + ports.MetaEncryption + "=" + e.Record(),
	}, nil
}

// sendVerdict reads the record and the pool's word on a dataset about to
// be sent (the row of its `zfs get`) and asks the domain how to send it.
func (s *Store) sendVerdict(row *propRow) (volume.SendVerdict, error) {
	v, err := volume.DecideSend(row.meta[ports.MetaEncryption], s.stored(row))
	if err == nil && v.ParentEncrypted {
		s.parentEncrypted.Do(func() {
			s.log.Info("volumes here are encrypted at rest by their parent dataset (its key, the operator's): they are sent decrypted over the peers' mTLS, as ordinary volumes",
				zap.String("dataset", row.name), zap.String("encryptionroot", row.native["encryptionroot"]))
		})
	}
	return v, err
}

// knownPlain reports whether the volume was found, by an earlier check,
// to be sent plain (not raw, not refused): its sends may start while the
// ownership check runs, as on main. A volume's encryption never changes
// after its creation; the verdict is forgotten when the dataset is
// destroyed or replaced.
func (s *Store) knownPlain(id volume.ID) bool {
	_, ok := s.plain.Load(id)
	return ok
}

// remember keeps a verdict of DecideSend: only "plain" is kept, a raw
// or refused volume is checked before every send.
func (s *Store) remember(id volume.ID, v volume.SendVerdict) {
	if !v.Raw {
		s.plain.Store(id, struct{}{})
	}
}

// forget drops what is known of the volume's sends.
func (s *Store) forget(id volume.ID) { s.plain.Delete(id) }

// tokenRaw tells from `zfs send -nvt` output whether the interrupted
// stream was raw (the token's boolean "rawok"): `zfs send -t` resumes it
// with the flags it was started with.
func tokenRaw(out string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "rawok" || strings.HasPrefix(f[0], "rawok=")) {
			return true
		}
	}
	return false
}

// streamRaw tells from a stream's first bytes (its DRR_BEGIN record)
// whether it is raw; false when it is not a send stream.
func streamRaw(head []byte) bool {
	order, ok := beginOrder(head)
	if !ok {
		return false
	}
	features := (order.Uint64(head[drrVersionInfoAt:]) >> 2) & (1<<30 - 1)
	return features&featureRaw != 0
}

// raw reports whether the tapped stream's header says raw.
func (h *headerTap) raw() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return streamRaw(h.head)
}

// receivedRecord asks the domain what a copy received whole records
// (volume.RecordReceived) and whether it is mounted once in place. A
// plaintext stream records nothing and is mounted, exactly as on main (no
// property Ferry did not set there, and no extra read). A raw stream is
// read from the staging dataset's row, before the rename, so that the
// decision to mount never depends on a read after it: the copy records
// its cipher and key format, and is left unmounted unless its key is
// loaded here (a secondary of an encrypted volume holds ciphertext only).
func (s *Store) receivedRecord(ctx context.Context, dataset string, raw bool) (meta map[string]string, mount bool, err error) {
	if !raw {
		return nil, true, nil
	}
	if !s.encrypts {
		return nil, false, fmt.Errorf("a raw stream on a pool that cannot encrypt: %w", volume.ErrNotFerrysKey)
	}
	rows, err := s.get(ctx, dataset)
	if err != nil {
		return nil, false, err
	}
	if len(rows) != 1 {
		return nil, false, fmt.Errorf("%s: zfs get returned %d datasets", dataset, len(rows))
	}
	st := s.stored(rows[0])
	rec, err := volume.RecordReceived(raw, st)
	if err != nil {
		return nil, false, err
	}
	return map[string]string{ports.MetaEncryption: rec}, st.KeyLoaded, nil
}

// LoadKey implements ports.SnapshotStore: it ensures the key is loaded
// and the filesystem mounted. `zfs load-key -n -L prompt` checks the key
// every time, also when it is already loaded (libzfs skips its "Key
// already loaded" refusal for -n, and the kernel only unwraps the stored
// key with it): a wrong key is ErrKeyRejected and changes nothing. Then,
// if the key is not loaded, `zfs load-key -L prompt` loads it; then the
// filesystem is mounted (a key loaded but a filesystem unmounted is
// mounted, never skipped). The key goes on stdin each time.
func (s *Store) LoadKey(ctx context.Context, id volume.ID, key volume.Key) error {
	info, err := s.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	st := info.Encryption
	if !st.Known || !st.Encrypted() || !st.OwnRoot {
		return fmt.Errorf("load key of volume %s: not its own encryption root (encryption %q): %w", id, st.Cipher, ports.ErrInvalid)
	}
	ds := s.dataset(id)
	if _, err := s.run.zfsStdin(ctx, key.Bytes(), "load-key", "-n", "-L", "prompt", ds); err != nil {
		return fmt.Errorf("load key of volume %s: checking the key: %w", id, err)
	}
	if !st.KeyLoaded {
		_, err := s.run.zfsStdin(ctx, key.Bytes(), "load-key", "-L", "prompt", ds)
		var ce *CommandError
		if err != nil && !(errors.As(err, &ce) && strings.Contains(ce.Stderr, "already loaded")) {
			return fmt.Errorf("load key of volume %s: %w", id, err)
		}
	}
	if _, err := s.run.zfs(ctx, "mount", ds); err != nil && !strings.Contains(err.Error(), "already mounted") {
		return fmt.Errorf("load key of volume %s: mounting: %w", id, err)
	}
	return nil
}

// UnloadKey implements ports.SnapshotStore: unmount (retried while
// briefly busy; ErrBusy while a bind mount of it remains), then `zfs
// unload-key`.
func (s *Store) UnloadKey(ctx context.Context, id volume.ID) error {
	info, err := s.GetVolume(ctx, id)
	if err != nil {
		return err
	}
	st := info.Encryption
	if !st.Known || !st.Encrypted() || !st.OwnRoot || !st.KeyLoaded {
		return nil
	}
	ds := s.dataset(id)
	if err := s.unmountOwn(ctx, ds, info.MountPath); err != nil {
		return fmt.Errorf("unload key of volume %s: %w", id, err)
	}
	_, err = s.run.zfs(ctx, "unload-key", ds)
	var ce *CommandError
	if err != nil && !(errors.As(err, &ce) && strings.Contains(ce.Stderr, "already unloaded")) {
		return fmt.Errorf("unload key of volume %s: %w", id, err)
	}
	return nil
}

// zfsStdin runs a zfs subcommand with stdin as its standard input (a
// key): the bytes never appear in its arguments or environment, and the
// error keeps zfs's stderr, which names the dataset, never the key.
func (r runner) zfsStdin(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		case <-ctx.Done():
			return nil, &CommandError{Args: append([]string{r.zfsBin}, args...), Err: ctx.Err()}
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := r.command(ctx, r.zfsBin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r.done(r.zfsBin, args, start, err)
	if err != nil {
		return nil, r.fail(ctx, r.zfsBin, args, stderr.String(), err)
	}
	return stdout.Bytes(), nil
}
