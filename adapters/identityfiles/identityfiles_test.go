package identityfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferry-csi/ferry/ports"
)

func TestAPairSavedIsLoaded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "peer-identity")
	d, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Load(); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Load before any Save: %v, want ErrNotFound", err)
	}
	if err := d.Save([]byte("cert 1"), []byte("key 1")); err != nil {
		t.Fatal(err)
	}
	cert, key, err := d.Load()
	if err != nil || string(cert) != "cert 1" || string(key) != "key 1" {
		t.Fatalf("Load = %q, %q, %v", cert, key, err)
	}
	if err := d.Save([]byte("cert 2"), []byte("key 2")); err != nil {
		t.Fatal(err)
	}
	cert, key, err = d.Load()
	if err != nil || string(cert) != "cert 2" || string(key) != "key 2" {
		t.Fatalf("Load after a renewal = %q, %q, %v", cert, key, err)
	}
	names := dirNames(t, dir)
	if strings.Join(names, " ") != "tls.crt tls.key" {
		t.Fatalf("the directory holds %q, want the two files only", names)
	}
}

func TestModesHoldWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "a", "b")
	syscall.Umask(0o022) // the directory as a daemon creates it
	d, _ := New(dir)
	if err := d.Save([]byte("c"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	syscall.Umask(0o077)
	if err := d.Save([]byte("c2"), []byte("k2")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{".": 0o755, CertFile: 0o644, KeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", name, got, want)
		}
	}
}

func TestEitherFileMissingIsNotFound(t *testing.T) {
	for _, gone := range []string{CertFile, KeyFile} {
		dir := t.TempDir()
		d, _ := New(dir)
		if err := d.Save([]byte("c"), []byte("k")); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(dir, gone))
		if _, _, err := d.Load(); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("without %s: %v, want ErrNotFound", gone, err)
		}
	}
}

func TestARelativePathIsRefused(t *testing.T) {
	for _, p := range []string{"peer", "./peer", ""} {
		if _, err := New(p); err == nil {
			t.Errorf("New(%q) accepted", p)
		}
	}
}

func TestADirectoryThatIsASymlinkIsRefused(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d, _ := New(link)
	if err := d.Save([]byte("c"), []byte("k")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Save through a symlinked directory: %v", err)
	}
	if _, _, err := d.Load(); err == nil || errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Load through a symlinked directory: %v", err)
	}
	if names := dirNames(t, real); len(names) != 0 {
		t.Fatalf("written through the link: %q", names)
	}
}

func TestAFileInPlaceOfTheDirectoryIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, nil, 0o644)
	d, _ := New(p)
	if err := d.Save([]byte("c"), []byte("k")); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Save = %v", err)
	}
}

func TestALinkInPlaceOfTheKeyIsReplacedNotWrittenThrough(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	os.Mkdir(dir, 0o755)
	outside := filepath.Join(base, "outside")
	os.WriteFile(outside, []byte("precious"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	d, _ := New(dir)
	if err := d.Save([]byte("c"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(outside); string(b) != "precious" {
		t.Fatalf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(filepath.Join(dir, KeyFile))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key is %v, %v; want a regular file, 0600", fi, err)
	}
}

func TestAnEmptyPairIsRefusedAndTheOldOneStays(t *testing.T) {
	d, _ := New(t.TempDir())
	if err := d.Save([]byte("c"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := d.Save(nil, []byte("k2")); !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("Save without a certificate: %v, want ErrInvalid", err)
	}
	if cert, key, err := d.Load(); err != nil || string(cert) != "c" || string(key) != "k" {
		t.Fatalf("Load = %q, %q, %v", cert, key, err)
	}
}

func TestTemporariesLeftByACrashAreRemoved(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".tls.key.tmp-ABCDEF"), []byte("half"), 0o600)
	os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("not ours"), 0o644)
	d, _ := New(dir)
	if err := d.Save([]byte("c"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	if names := dirNames(t, dir); strings.Join(names, " ") != "ca.crt tls.crt tls.key" {
		t.Fatalf("the directory holds %q", names)
	}
}

func TestAnOversizedFileIsNoPair(t *testing.T) {
	dir := t.TempDir()
	d, _ := New(dir)
	if err := d.Save([]byte("c"), []byte("k")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, CertFile), make([]byte, maxSize+1), 0o644)
	if _, _, err := d.Load(); err == nil || errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Load of an oversized certificate: %v", err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestRootsAreReadAtEveryCall(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ca.crt")
	f := RootsFile(p)
	if _, err := f.Roots(); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("Roots of no file: %v, want ErrNotFound", err)
	}
	os.WriteFile(p, []byte("ca 1"), 0o644)
	if b, err := f.Roots(); err != nil || string(b) != "ca 1" {
		t.Fatalf("Roots = %q, %v", b, err)
	}
	os.WriteFile(p, []byte("ca 2"), 0o644)
	if b, err := f.Roots(); err != nil || string(b) != "ca 2" {
		t.Fatalf("Roots after a rotation = %q, %v", b, err)
	}
}
