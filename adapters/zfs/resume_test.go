package zfs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferry-csi/ferry/adapters/zfs"
	"github.com/ferry-csi/ferry/ports"
	"github.com/ferry-csi/ferry/tests/zfstest"
)

// fakeOpenZFS is a stand-in zfs CLI that answers as OpenZFS 2.x does for
// the calls resumable transfers make, and records every argv it gets. It
// checks the argument lists Ferry builds; the semantics of resuming are
// OpenZFS's own (this machine's zfs-fuse has no resume tokens).
const fakeOpenZFS = `#!/bin/sh
echo "$*" >> "$FAKE_ZFS_LOG"
case "$*" in
  "get -H -o value type tank") echo filesystem ;;
  "create -p tank/ferry") ;;
  "get -H -o value receive_resume_token tank/ferry") echo - ;;
  "get -H -o value encryption tank/ferry")
    # As OpenZFS 0.7 (resume tokens, no encryption) and zfs-fuse answer.
    echo "bad property list: invalid property 'encryption'" >&2; exit 2 ;;
  "get -H -o value receive_resume_token tank/ferry/vol-1") echo 1-abc0-de-789c ;;
  "get -H -p -o name,property,value,source "*)
    shift 6
    for t in "$@"; do
      case "$t" in
        tank/ferry/vol-1)
          printf '%s\ttype\tfilesystem\t-\n' "$t"
          printf '%s\tferry.zfs.csi.io:driver\tferry.zfs.csi.io\tlocal\n' "$t" ;;
        tank/ferry/vol-1@ferry-1-[23]) printf '%s\ttype\tsnapshot\t-\n' "$t" ;;
        *) echo "cannot open '$t': dataset does not exist" >&2; exit 1 ;;
      esac
    done ;;
  "send -n -v -t 1-abc0-de-789c")
    printf 'resume token contents:\nnvlist version: 0\n\tobject = 0x6\n\toffset = 0x1000\n\ttoname = tank/ferry/vol-1@ferry-1-3\n' ;;
  "send -n -v -t 1-0ther-789c")
    printf 'resume token contents:\n\ttoname = tank/ferry/secret@ferry-1-3\n' ;;
  "send -n -v -t 1-bad")
    echo "cannot resume send: 'tank/ferry/vol-1@ferry-1-1' used in the initial send no longer exists" >&2; exit 255 ;;
  "send -t 1-abc0-de-789c") printf 'RESUMED-STREAM' ;;
  "recv -A tank/ferry/vol-1") ;;
  *) echo "fake zfs: unexpected: $*" >&2; exit 1 ;;
esac
`

func TestOnOpenZFSAnInterruptedTransferResumesWithAVerifiedToken(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "zfs")
	if err := os.WriteFile(bin, []byte(fakeOpenZFS), 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "argv.log")
	t.Setenv("FAKE_ZFS_LOG", logFile)
	zpool := filepath.Join(dir, "zpool")
	if err := os.WriteFile(zpool, []byte("#!/bin/sh\n[ \"$*\" = \"get all tank\" ] && exit 0\necho \"fake zpool: unexpected: $*\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := zfs.New(zfs.Config{Pool: "tank", Parent: "ferry", Driver: driver, ZFS: bin, Zpool: zpool})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.Resumable() {
		t.Fatal("a pool with receive_resume_token was not detected as resumable")
	}
	token, err := s.ResumeToken(ctx, "vol-1")
	if err != nil || token != "1-abc0-de-789c" {
		t.Fatalf("ResumeToken = %q, %v", token, err)
	}
	r, err := s.Send(ctx, ports.SendRequest{Volume: "vol-1", From: "ferry-1-2", To: "ferry-1-3", ResumeToken: token})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || string(got) != "RESUMED-STREAM" {
		t.Fatalf("resumed stream %q, %v", got, err)
	}
	r.Close()
	_, err = s.Send(ctx, ports.SendRequest{Volume: "vol-1", From: "ferry-1-2", To: "ferry-1-3", ResumeToken: "1-0ther-789c"})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a token naming another dataset: %v, want ErrInvalid", err)
	}
	_, err = s.Send(ctx, ports.SendRequest{Volume: "vol-1", From: "ferry-1-2", To: "ferry-1-3", ResumeToken: "1-bad"})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("a token zfs cannot resume: %v, want ErrInvalid (the receiver then discards its partial state)", err)
	}
	if err := s.DiscardPartial(ctx, "vol-1"); err != nil {
		t.Fatal(err)
	}
	argv, _ := os.ReadFile(logFile)
	for _, want := range []string{"send -n -v -t 1-abc0-de-789c", "send -t 1-abc0-de-789c", "recv -A tank/ferry/vol-1"} {
		if !strings.Contains(string(argv), want+"\n") {
			t.Errorf("zfs was never run as %q; calls:\n%s", want, argv)
		}
	}
	if strings.Contains(string(argv), "send -t 1-0ther-789c") {
		t.Error("a token naming another dataset was sent")
	}
}

func TestOnZFSFuseTransfersRestartFromTheLastCompleteSnapshot(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-resume", "1G")
	s := newStore(t, pool)
	if isZFSFuse() && s.Resumable() {
		t.Fatal("zfs-fuse has no resume tokens, yet the store says it can resume")
	}
	if token, err := s.ResumeToken(context.Background(), "none"); err != nil || token != "" {
		t.Fatalf("ResumeToken of a missing volume = %q, %v", token, err)
	}
}

func isZFSFuse() bool {
	_, err := os.Stat("/usr/sbin/zfs-fuse")
	return err == nil
}

// A volume deleted during its first full fetch leaves no partial copy:
// on OpenZFS a cut-off receive is kept (with its resume token) in the
// staging dataset while the volume itself does not exist yet.
func TestAVolumeDeletedDuringItsFirstFetchLeavesNoPartialCopy(t *testing.T) {
	pool := zfstest.NewPool(t, "ferry-partial", "1G")
	s := newStore(t, pool)
	ctx := context.Background()
	src, err := s.CreateVolume(ctx, "src", ports.CreateOptions{CapacityBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src.MountPath, "big"), bytes.Repeat([]byte("ferry"), 400_000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, "src", "s1", nil); err != nil {
		t.Fatal(err)
	}
	r, err := s.Send(ctx, ports.SendRequest{Volume: "src", To: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := s.Receive(ctx, "dst", bytes.NewReader(head)); err == nil {
		t.Fatal("a truncated stream was received")
	}
	if s.Resumable() {
		if token, err := s.ResumeToken(ctx, "dst"); err != nil || token == "" {
			t.Fatalf("OpenZFS kept no partial receive to resume (token %q, %v): this test checks nothing", token, err)
		}
	}
	if err := s.DestroyVolume(ctx, "dst"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("DestroyVolume of a volume never received whole: %v; want ErrNotFound", err)
	}
	out, err := exec.Command("zfs", "list", "-H", "-o", "name", "-r", pool.Name).CombinedOutput()
	if err != nil {
		t.Fatalf("zfs list: %v: %s", err, out)
	}
	if strings.Contains(string(out), "_incoming") {
		t.Fatalf("a partial copy outlived its volume's deletion:\n%s", out)
	}
}
