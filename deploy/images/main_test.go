package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// buildTool compiles this command once per test.
func buildTool(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "images")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// elfFor builds a tiny static program for arch: a real binary of that
// architecture.
func elfFor(t *testing.T, dir, arch string) string {
	t.Helper()
	src := filepath.Join(dir, "prog.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "linux-"+arch, "prog")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s: %v\n%s", arch, err, b)
	}
	return out
}

// untar unpacks an OCI archive into a directory.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// An image for two platforms is one OCI index naming one image per
// platform, each with its own architecture's binary, its config's
// entrypoint and labels, files owned by root at the epoch with fixed
// modes; the archive names it for containerd under the reference and
// every -tag; the same inputs give the same digest.
func TestAMultiPlatformImageIsOneIndexWithAnImagePerPlatform(t *testing.T) {
	tool := buildTool(t)
	dir := t.TempDir()
	elfFor(t, dir, "amd64")
	elfFor(t, dir, "arm64")
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img.tar")
	args := []string{"-ref", "example.com/ferry-csi/prog:v1.2.3", "-tag", "dev",
		"-platform", "linux/amd64", "-platform", "linux/arm64",
		"-file", filepath.Join(dir, "linux-{arch}", "prog") + "=/usr/local/bin/prog",
		"-file", script + "=/etc/script",
		"-symlink", "/usr/local/sbin/zfs=/usr/local/bin/prog", "-dir", "/tmp=1777",
		"-label", "org.opencontainers.image.version=v1.2.3",
		"-entrypoint", "/usr/local/bin/prog", "-o", out}
	if b, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		t.Fatalf("images: %v\n%s", err, b)
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		t.Fatalf("images again: %v\n%s", err, b)
	}
	if again, _ := os.ReadFile(out); !bytes.Equal(first, again) {
		t.Error("the same inputs wrote another archive")
	}

	lay := filepath.Join(dir, "layout")
	untar(t, out, lay)
	p, err := layout.FromPath(lay)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	var digest v1.Hash
	for _, d := range tm.Manifests {
		names[d.Annotations["io.containerd.image.name"]+" "+d.Annotations["org.opencontainers.image.ref.name"]] = true
		digest = d.Digest
	}
	if len(tm.Manifests) != 2 || !names["example.com/ferry-csi/prog:v1.2.3 v1.2.3"] || !names["example.com/ferry-csi/prog:dev dev"] {
		t.Fatalf("the layout's index names %v, want the reference and its dev tag", names)
	}
	idx, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if string(im.MediaType) != "application/vnd.oci.image.index.v1+json" || len(im.Manifests) != 2 {
		t.Fatalf("index %s with %d manifests, want an OCI index of 2", im.MediaType, len(im.Manifests))
	}
	wantMachine := map[string]string{"amd64": "\x3e\x00", "arm64": "\xb7\x00"} // e_machine, little-endian
	for _, d := range im.Manifests {
		arch := d.Platform.Architecture
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch || d.Platform.OS != "linux" {
			t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		if strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/prog" || cf.Config.Labels["org.opencontainers.image.version"] != "v1.2.3" || !cf.Created.IsZero() && cf.Created.Unix() != 0 {
			t.Errorf("%s: config %+v created %v", arch, cf.Config, cf.Created)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s: %d layers (%v)", arch, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		files := map[string]*tar.Header{}
		var machine string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			if h.Name == "usr/local/bin/prog" {
				b, _ := io.ReadAll(tr)
				if len(b) > 20 {
					machine = string(b[18:20])
				}
			}
			if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
				t.Errorf("%s: %s owned %d:%d at %v", arch, h.Name, h.Uid, h.Gid, h.ModTime)
			}
		}
		rc.Close()
		if machine != wantMachine[arch] {
			t.Errorf("%s: /usr/local/bin/prog is built for machine %q", arch, machine)
		}
		if h := files["etc/script"]; h == nil || h.Mode != 0o755 {
			t.Errorf("%s: etc/script %+v, want mode 0755 (not the build machine's 0700)", arch, h)
		}
		if h := files["usr/local/sbin/zfs"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/usr/local/bin/prog" {
			t.Errorf("%s: the zfs link %+v", arch, h)
		}
		if h := files["tmp/"]; h == nil || h.Mode != 0o1777 {
			t.Errorf("%s: tmp/ %+v", arch, h)
		}
	}
}

// A binary of another architecture than its platform's is refused, and
// so is an unqualified reference.
func TestWhatWouldFailOnlyOnTheNodeIsRefused(t *testing.T) {
	tool := buildTool(t)
	dir := t.TempDir()
	elfFor(t, dir, "amd64")
	out := filepath.Join(dir, "img.tar")
	cmd := exec.Command(tool, "-ref", "example.com/x/prog:v1", "-platform", "linux/arm64",
		"-file", filepath.Join(dir, "linux-amd64", "prog")+"=/prog", "-entrypoint", "/prog", "-o", out)
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "not arm64") {
		t.Errorf("an amd64 binary in the arm64 image: %v %s", err, b)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an archive was written anyway")
	}
	for _, ref := range []string{"prog", "prog:v1", "ferry-csi/prog:v1"} {
		cmd = exec.Command(tool, "-ref", ref, "-file", filepath.Join(dir, "linux-amd64", "prog")+"=/prog", "-entrypoint", "/prog", "-o", out)
		if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "registry/repository:tag") {
			t.Errorf("the unqualified reference %s: %v %s", ref, err, b)
		}
	}
}
