package zfs_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

// fakeEncryptingZFS is a stand-in zfs CLI answering as OpenZFS 2.x with
// the encryption feature does, for the calls encrypted volumes make. It
// records every argv, and the standard input of the commands that take a
// key, so that the tests check exactly what Ferry runs and that a key
// never appears in an argument.
//
// Datasets: vol-e Ferry encrypted (its own root, recorded, key not
// loaded: a secondary's copy); vol-p plaintext; vol-x its own root
// without Ferry's record; vol-i encrypted by its parent, recorded off;
// vol-n the one CreateVolume makes.
const fakeEncryptingZFS = `#!/bin/sh
echo "$*" >> "$FAKE_ZFS_LOG"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4"; }
ds() { # name encryption root keystatus record
  row "$1" type filesystem -
  row "$1" ferry.zfs.csi.io:driver ferry.zfs.csi.io local
  row "$1" mountpoint "/mnt/$1" default
  row "$1" encryption "$2" -
  row "$1" encryptionroot "$3" -
  row "$1" keystatus "$4" -
  row "$1" keyformat passphrase -
  [ -n "$5" ] && row "$1" ferry.zfs.csi.io:encryption "$5" local
  true
}
case "$*" in
  "get -H -o value type tank") echo filesystem ;;
  "create -p tank/ferry") ;;
  "get -H -o value receive_resume_token tank/ferry") echo - ;;
  "get -H -o value encryption tank/ferry") echo off ;;
  "get -H -p -o name,property,value,source "*)
    # vol-p's check lasts until its send started (or 3 s): whether the
    # store overlaps the two shows in the log's order, however slow the
    # machine (a stale mark from an earlier send is cleared first).
    case "$*" in *vol-p*)
      rm -f "$FAKE_ZFS_LOG.sent"; i=0
      while [ ! -e "$FAKE_ZFS_LOG.sent" ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done ;;
    esac
    trap 'echo "get-done" >> "$FAKE_ZFS_LOG"' EXIT
    shift 6
    for t in "$@"; do
      case "$t" in
        tank/ferry/vol-e) ds "$t" aes-256-gcm "$t" unavailable aes-256-gcm/passphrase ;;
        tank/ferry/vol-n) ds "$t" aes-256-gcm "$t" available aes-256-gcm/passphrase ;;
        tank/ferry/vol-p) ds "$t" off - - "" ;;
        tank/ferry/vol-x) ds "$t" aes-256-gcm "$t" available "" ;;
        tank/ferry/vol-i) ds "$t" aes-256-gcm tank/ferry available off ;;
        tank/ferry/vol-[epxi]@ferry-1-[12]) row "$t" type snapshot - ;;
        *) echo "cannot open '$t': dataset does not exist" >&2; exit 1 ;;
      esac
    done ;;
  create*|"load-key -n -L prompt tank/ferry/vol-"[en]|"load-key -L prompt tank/ferry/vol-e")
    cat > "$FAKE_ZFS_STDIN"
    echo "$*" >> "$FAKE_ZFS_STDIN.log"
    case "$*" in load-key*)
      [ "$(cat "$FAKE_ZFS_STDIN")" = "correct horse battery" ] || { echo "Key load error: Incorrect key provided for '${5}'." >&2; exit 255; } ;;
    esac ;;
  "mount tank/ferry/vol-e") ;;
  "mount tank/ferry/vol-n") echo "cannot mount 'tank/ferry/vol-n': filesystem already mounted" >&2; exit 1 ;;
  "send -w -i tank/ferry/vol-e@ferry-1-1 tank/ferry/vol-e@ferry-1-2") printf 'RAW' ;;
  "send -i tank/ferry/vol-p@ferry-1-1 tank/ferry/vol-p@ferry-1-2") touch "$FAKE_ZFS_LOG.sent"; printf 'PLAIN' ;;
  "send -i tank/ferry/vol-i@ferry-1-1 tank/ferry/vol-i@ferry-1-2") printf 'PARENT' ;;
  "send -n -v -t 1-plain") printf 'resume token contents:\nnvlist version: 0\n\ttoname = tank/ferry/vol-e@ferry-1-2\n\tembedok\n' ;;
  "send -n -v -t 1-raw") printf 'resume token contents:\nnvlist version: 0\n\ttoname = tank/ferry/vol-e@ferry-1-2\n\tembedok\n\trawok\n' ;;
  "send -t 1-raw") printf 'RAW-RESUMED' ;;
  *) echo "fake zfs: unexpected: $*" >&2; exit 1 ;;
esac
`

// fakeEncZpool answers the encryption feature's state.
const fakeEncZpool = `#!/bin/sh
echo "zpool $*" >> "$FAKE_ZFS_LOG"
case "$*" in
  "get -H -o value feature@encryption tank") echo active ;;
  "get all tank") printf 'NAME  PROPERTY  VALUE  SOURCE\ntank  feature@encryption  active  local\n' ;;
  *) echo "fake zpool: unexpected: $*" >&2; exit 1 ;;
esac
`

type encFake struct {
	store      *zfs.Store
	log, stdin string
}

func newEncFake(t *testing.T, zfsScript string) encFake {
	t.Helper()
	dir := t.TempDir()
	bin, zpool := filepath.Join(dir, "zfs"), filepath.Join(dir, "zpool")
	for path, script := range map[string]string{bin: zfsScript, zpool: fakeEncZpool} {
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := encFake{log: filepath.Join(dir, "argv.log"), stdin: filepath.Join(dir, "stdin")}
	t.Setenv("FAKE_ZFS_LOG", f.log)
	t.Setenv("FAKE_ZFS_STDIN", f.stdin)
	s, err := zfs.New(zfs.Config{Pool: "tank", Parent: "ferry", Driver: driver, ZFS: bin, Zpool: zpool})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.store = s
	return f
}

func (f encFake) argv(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile(f.log)
	return string(b)
}

func (f encFake) ran(t *testing.T, line string) bool {
	return strings.Contains(f.argv(t), line+"\n")
}

func TestAnEncryptedVolumeIsCreatedAsItsOwnEncryptionRootWithTheKeyOnStdin(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	if !f.store.CanEncrypt() {
		t.Fatal("a pool with feature@encryption active was not detected as able to encrypt")
	}
	key, err := volume.ParseKey(volume.KeyPassphrase, map[string]string{"key": "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := f.store.CreateVolume(context.Background(), "vol-n", ports.CreateOptions{
		CapacityBytes: 1 << 30,
		Metadata:      map[string]string{ports.MetaVolume: "vol-n", ports.MetaEncryption: "off"},
		Encryption:    volume.Encryption{Cipher: "aes-256-gcm", KeyFormat: volume.KeyPassphrase},
		Key:           key,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "create -o refquota=1073741824 -o refreservation=1073741824 -o ferry.zfs.csi.io:driver=ferry.zfs.csi.io -o ferry.zfs.csi.io:volume=vol-n " +
		"-o encryption=aes-256-gcm -o keyformat=passphrase -o keylocation=prompt -o ferry.zfs.csi.io:encryption=aes-256-gcm/passphrase tank/ferry/vol-n"
	if !f.ran(t, want) {
		t.Fatalf("zfs was never run as\n%s\ncalls:\n%s", want, f.argv(t))
	}
	if got, _ := os.ReadFile(f.stdin); string(got) != "correct horse battery" {
		t.Fatalf("zfs create read %q on stdin, want the key", got)
	}
	if strings.Contains(f.argv(t), "correct horse") {
		t.Fatalf("the key is in an argument:\n%s", f.argv(t))
	}
	if !info.Encryption.OwnRoot || !info.Encryption.KeyLoaded || info.Metadata[ports.MetaEncryption] != "aes-256-gcm/passphrase" {
		t.Fatalf("VolumeInfo = %+v", info)
	}
}

func TestAnEncryptedVolumeIsSentRawAndAPlaintextOneNever(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	read := func(id volume.ID) (string, error) {
		r, err := f.store.Send(ctx, ports.SendRequest{Volume: id, From: "ferry-1-1", To: "ferry-1-2"})
		if err != nil {
			return "", err
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		return string(b), err
	}
	if got, err := read("vol-e"); err != nil || got != "RAW" {
		t.Fatalf("send of an encrypted volume: %q, %v", got, err)
	}
	if got, err := read("vol-p"); err != nil || got != "PLAIN" {
		t.Fatalf("send of a plaintext volume: %q, %v", got, err)
	}
	// An ordinary volume encrypted by its parent (encryptionroot the
	// parent) is sent as before encryption: not raw, not refused.
	if got, err := read("vol-i"); err != nil || got != "PARENT" {
		t.Fatalf("send of a volume encrypted by its parent: %q, %v; want sent as an ordinary volume", got, err)
	}
	if _, err := read("vol-x"); !errors.Is(err, volume.ErrNotFerrysKey) {
		t.Fatalf("send of vol-x (its own encryption root, no record of Ferry's): %v, want ErrNotFerrysKey", err)
	}
	argv := f.argv(t)
	for _, line := range strings.Split(argv, "\n") {
		if strings.HasPrefix(line, "send") && strings.Contains(line, "vol-p") && strings.Contains(line, "-w") {
			t.Errorf("a plaintext volume was sent raw: %s", line)
		}
		if strings.HasPrefix(line, "send") && strings.Contains(line, "vol-e") && !strings.Contains(line, "-w") {
			t.Errorf("an encrypted volume was sent without -w: %s", line)
		}
		if strings.HasPrefix(line, "send") && strings.Contains(line, "vol-i") && strings.Contains(line, "-w") {
			t.Errorf("a volume encrypted by its parent was sent raw: %s", line)
		}
		if strings.HasPrefix(line, "send") && strings.Contains(line, "vol-x") {
			t.Errorf("a refused volume was sent: %s", line)
		}
	}
}

func TestAResumedSendOfAnEncryptedVolumeMustResumeARawStream(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	_, err := f.store.Send(ctx, ports.SendRequest{Volume: "vol-e", From: "ferry-1-1", To: "ferry-1-2", ResumeToken: "1-plain"})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a token of a plaintext stream of an encrypted volume: %v, want ErrInvalid (the receiver starts over)", err)
	}
	if f.ran(t, "send -t 1-plain") {
		t.Fatal("a plaintext stream of an encrypted volume was resumed")
	}
	r, err := f.store.Send(ctx, ports.SendRequest{Volume: "vol-e", From: "ferry-1-1", To: "ferry-1-2", ResumeToken: "1-raw"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	r.Close()
	if string(b) != "RAW-RESUMED" {
		t.Fatalf("resumed raw stream %q", b)
	}
}

func TestAKeyIsCheckedOnStdinBeforeItIsLoadedAndAWrongOneChangesNothing(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	wrong, _ := volume.ParseKey(volume.KeyPassphrase, map[string]string{"key": "wrong horse battery"})
	err := f.store.LoadKey(ctx, "vol-e", wrong)
	if !errors.Is(err, ports.ErrKeyRejected) {
		t.Fatalf("LoadKey with a wrong key: %v, want ErrKeyRejected", err)
	}
	if strings.Contains(err.Error(), "wrong horse") {
		t.Fatalf("the error shows the key: %v", err)
	}
	if f.ran(t, "load-key -L prompt tank/ferry/vol-e") || f.ran(t, "mount tank/ferry/vol-e") {
		t.Fatalf("a wrong key went past its check:\n%s", f.argv(t))
	}
	good, _ := volume.ParseKey(volume.KeyPassphrase, map[string]string{"key": "correct horse battery"})
	if err := f.store.LoadKey(ctx, "vol-e", good); err != nil {
		t.Fatal(err)
	}
	argv := f.argv(t)
	check := strings.Index(argv, "load-key -n -L prompt tank/ferry/vol-e\n")
	load := strings.LastIndex(argv, "load-key -L prompt tank/ferry/vol-e\n")
	mount := strings.LastIndex(argv, "mount tank/ferry/vol-e\n")
	if check < 0 || load < check || mount < load {
		t.Fatalf("want load-key -n, then load-key, then mount; calls:\n%s", argv)
	}
	if got, _ := os.ReadFile(f.stdin); string(got) != "correct horse battery" {
		t.Fatalf("load-key read %q on stdin", got)
	}
	if strings.Contains(argv, "horse") {
		t.Fatalf("a key is in an argument:\n%s", argv)
	}
	for _, id := range []volume.ID{"vol-p", "vol-i"} {
		if err := f.store.LoadKey(ctx, id, good); !errors.Is(err, ports.ErrInvalid) {
			t.Fatalf("LoadKey of %s (not its own encryption root): %v, want ErrInvalid", id, err)
		}
	}
}

// fakeFuseZFS answers as zfs-fuse: no encryption property.
const fakeFuseZFS = `#!/bin/sh
echo "$*" >> "$FAKE_ZFS_LOG"
case "$*" in
  "get -H -o value type tank") echo filesystem ;;
  "create -p tank/ferry") ;;
  "get -H -o value receive_resume_token tank/ferry"|"get -H -o value encryption tank/ferry")
    echo "bad property list: invalid property '${5}'" >&2; exit 2 ;;
  *) echo "fake zfs: unexpected: $*" >&2; exit 1 ;;
esac
`

func TestAPoolThatCannotEncryptRefusesAnEncryptedVolumeClearlyAndMakesNothing(t *testing.T) {
	f := newEncFake(t, fakeFuseZFS)
	if f.store.CanEncrypt() {
		t.Fatal("zfs-fuse was taken for a pool that can encrypt")
	}
	key, _ := volume.ParseKey(volume.KeyRaw, map[string]string{"key": strings.Repeat("k", 32)})
	_, err := f.store.CreateVolume(context.Background(), "vol-n", ports.CreateOptions{
		CapacityBytes: 1 << 30, Encryption: volume.Encryption{Cipher: "aes-256-gcm", KeyFormat: volume.KeyRaw}, Key: key})
	if !errors.Is(err, volume.ErrUnsupported) || !strings.Contains(err.Error(), "cannot encrypt") {
		t.Fatalf("CreateVolume encrypted on zfs-fuse: %v, want ErrUnsupported saying the pool cannot encrypt", err)
	}
	if strings.Contains(f.argv(t), "create -o") || strings.Contains(f.argv(t), "zpool") {
		t.Fatalf("zfs-fuse was asked to create, or zpool about a feature it does not know:\n%s", f.argv(t))
	}
}

// Only zfs-fuse's (and OpenZFS 0.7's) "bad property list: invalid
// property" means the pool cannot encrypt; any other failure of the
// detection fails Open, clearly, rather than guess the mode.
func TestOpenFailsWhenTheEncryptionModeCannotBeDetected(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "zfs")
	script := strings.Replace(fakeEncryptingZFS, `"get -H -o value encryption tank/ferry") echo off ;;`,
		`"get -H -o value encryption tank/ferry") echo "cannot open 'tank/ferry': I/O error" >&2; exit 1 ;;`, 1)
	if script == fakeEncryptingZFS {
		t.Fatal("the fake was not changed")
	}
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_ZFS_LOG", filepath.Join(dir, "argv.log"))
	s, err := zfs.New(zfs.Config{Pool: "tank", Parent: "ferry", Driver: driver, ZFS: bin, Zpool: filepath.Join(dir, "no-zpool")})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(context.Background())
	if err == nil || !strings.Contains(err.Error(), "can encrypt") || !strings.Contains(err.Error(), "I/O error") {
		t.Fatalf("Open with an unexpected error from zfs get encryption: %v, want a failure naming the detection", err)
	}
}

// On a pool that can encrypt, the first send of a volume waits for the
// check (nothing is known of it yet: never a plaintext send of what may be
// encrypted); once the volume is known to be plain, its sends overlap the
// ownership check, as on main. An encrypted volume always waits.
func TestAPlaintextVolumeKnownAsSuchOverlapsItsSendWithTheCheck(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	send := func(id volume.ID) string {
		t.Helper()
		before := len(f.argv(t))
		r, err := f.store.Send(ctx, ports.SendRequest{Volume: id, From: "ferry-1-1", To: "ferry-1-2"})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r)
		r.Close()
		if len(b) == 0 {
			t.Fatal("an empty stream")
		}
		return f.argv(t)[before:]
	}
	order := func(calls string) (sendAt, doneAt int) {
		return strings.Index(calls, "send -"), strings.Index(calls, "get-done")
	}
	for i, want := range []bool{false, true, true} {
		calls := send("vol-p")
		sendAt, doneAt := order(calls)
		if overlapped := sendAt < doneAt; overlapped != want || sendAt < 0 || doneAt < 0 {
			t.Fatalf("send %d of a plaintext volume: overlapped %v, want %v; calls:\n%s", i+1, overlapped, want, calls)
		}
	}
	for i := 0; i < 2; i++ {
		calls := send("vol-e")
		if sendAt, doneAt := order(calls); sendAt < doneAt {
			t.Fatalf("send %d of an encrypted volume started before its check ended:\n%s", i+1, calls)
		}
	}
}

// A key already loaded is checked all the same (a wrong Secret fails on
// the node that created the volume too), never loaded twice, and the
// filesystem is mounted (a loaded key is not a mounted filesystem).
func TestALoadedKeyIsStillCheckedAndTheFilesystemMounted(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	wrong, _ := volume.ParseKey(volume.KeyPassphrase, map[string]string{"key": "wrong horse battery"})
	if err := f.store.LoadKey(ctx, "vol-n", wrong); !errors.Is(err, ports.ErrKeyRejected) {
		t.Fatalf("LoadKey of a loaded key with a wrong one: %v, want ErrKeyRejected", err)
	}
	if f.ran(t, "mount tank/ferry/vol-n") {
		t.Fatalf("a wrong key went past its check:\n%s", f.argv(t))
	}
	good, _ := volume.ParseKey(volume.KeyPassphrase, map[string]string{"key": "correct horse battery"})
	if err := f.store.LoadKey(ctx, "vol-n", good); err != nil {
		t.Fatal(err)
	}
	if !f.ran(t, "load-key -n -L prompt tank/ferry/vol-n") || f.ran(t, "load-key -L prompt tank/ferry/vol-n") || !f.ran(t, "mount tank/ferry/vol-n") {
		t.Fatalf("want the key checked, not loaded again, the filesystem mounted; calls:\n%s", f.argv(t))
	}
}

// A receiver that cannot take a raw stream (a peer of protocol version
// 1) is never sent an encrypted volume, in any form; plaintext volumes
// are sent to it as ever.
func TestAnEncryptedVolumeIsRefusedToAReceiverThatCannotTakeARawStream(t *testing.T) {
	f := newEncFake(t, fakeEncryptingZFS)
	ctx := context.Background()
	_, err := f.store.Send(ctx, ports.SendRequest{Volume: "vol-e", From: "ferry-1-1", To: "ferry-1-2", PlaintextOnly: true})
	if !errors.Is(err, ports.ErrRawUnsupported) {
		t.Fatalf("send of an encrypted volume to a receiver of plaintext only: %v, want ErrRawUnsupported", err)
	}
	for _, line := range strings.Split(f.argv(t), "\n") {
		if strings.HasPrefix(line, "send") {
			t.Fatalf("a stream was started: %s", line)
		}
	}
	r, err := f.store.Send(ctx, ports.SendRequest{Volume: "vol-p", From: "ferry-1-1", To: "ferry-1-2", PlaintextOnly: true})
	if err != nil {
		t.Fatalf("send of a plaintext volume to a receiver of plaintext only: %v", err)
	}
	r.Close()
}
