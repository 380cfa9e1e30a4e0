// Command images writes one container image, for one or more platforms, as
// an OCI image index with go-containerregistry: into an OCI archive (a tar
// of an OCI image layout, which `ctr images import` and `skopeo copy
// oci-archive:` read) and, with -push, to its registry. Nothing is pulled:
// every layer is made from files of this machine. `make images` and
// `make push` run it for Ferry's image and the kubernetes-csi sidecars.
//
//	images -ref ghcr.io/ferry-csi/ferry:v0.2.0 -tag dev \
//	  -platform linux/amd64 -platform linux/arm64 \
//	  -file 'bin/linux-{arch}/ferry=/usr/local/bin/ferry' \
//	  -symlink /usr/local/sbin/zfs=/usr/local/bin/ferry \
//	  -entrypoint /usr/local/bin/ferry -o images/ferry.tar
//
// -file SRC=DST copies a file into every platform's image; {arch} in SRC is
// the platform's architecture (amd64, arm64), and an ELF file for another
// architecture than its platform's is refused. -ldd BIN[=DST] copies a
// dynamically linked binary of this machine with the libraries `ldd`
// lists, into this machine's platform's image only. -dir DST[=MODE] makes an
// empty directory, -symlink DST=TARGET a symbolic link. -tag names the
// same index under another tag of the reference's repository. The layers
// are reproducible: fixed timestamps and owners, entries sorted; the same
// inputs give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one thing in a layer.
type entry struct {
	src    string // file to copy; "" for a directory or symlink
	link   string // symlink target
	dir    bool
	mode   int64
	target string // path in the image, absolute
}

// epoch is every entry's and the config's timestamp.
var epoch = time.Unix(0, 0).UTC()

type spec struct {
	ref                          name.Tag
	tags                         []string
	platforms                    []v1.Platform
	files, ldds, dirs, links     []string
	entrypoint, cmd, env, labels []string
}

func main() {
	var s spec
	var refFlag, out string
	var push bool
	var platforms, tags, files, ldds, dirs, links, entrypoint, cmd, env, labels list
	flag.StringVar(&refFlag, "ref", "", "the image's reference, registry/repository:tag (qualified)")
	flag.Var(&tags, "tag", "another tag of the same repository for the same index (repeatable)")
	flag.Var(&platforms, "platform", "os/arch to build for (repeatable; default this machine's)")
	flag.StringVar(&out, "o", "", "write the OCI archive (a tar of an OCI image layout) here")
	flag.BoolVar(&push, "push", false, "push the index to the reference's registry (and -tag tags)")
	flag.Var(&files, "file", "SRC=DST: a file into each platform's image; {arch} in SRC is the platform's (repeatable)")
	flag.Var(&ldds, "ldd", "BIN[=DST]: a binary of this machine and the libraries ldd lists (repeatable)")
	flag.Var(&dirs, "dir", "DST[=MODE]: an empty directory, mode in octal (repeatable)")
	flag.Var(&links, "symlink", "DST=TARGET: a symbolic link (repeatable)")
	flag.Var(&entrypoint, "entrypoint", "one entrypoint word (repeatable, in order)")
	flag.Var(&cmd, "cmd", "one default argument word (repeatable, in order)")
	flag.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	flag.Var(&labels, "label", "KEY=VALUE, an image label (repeatable)")
	flag.Parse()
	if len(ldds) > 0 && !slices.Contains(platforms, runtime.GOOS+"/"+runtime.GOARCH) && len(platforms) > 0 {
		log.Fatalf("images: -ldd copies this machine's binaries into its platform's image (%s/%s), which -platform leaves out", runtime.GOOS, runtime.GOARCH)
	}
	if refFlag == "" || (out == "" && !push) || len(entrypoint)+len(cmd) == 0 {
		log.Fatal("images: -ref, -o or -push, and -entrypoint or -cmd are required")
	}
	ref, err := name.NewTag(refFlag, name.StrictValidation)
	if host, _, ok := strings.Cut(refFlag, "/"); err == nil && (!ok || !strings.ContainsAny(host, ".:") && host != "localhost") {
		err = errors.New("no registry") // qualified names only: where a node pulls from is never a guess
	}
	if err != nil {
		log.Fatalf("images: -ref %q: %v (give registry/repository:tag)", refFlag, err)
	}
	s.ref, s.tags = ref, tags
	if len(platforms) == 0 {
		platforms = list{"linux/" + runtime.GOARCH}
	}
	for _, p := range platforms {
		pl, err := v1.ParsePlatform(p)
		if err != nil || pl.OS == "" || pl.Architecture == "" {
			log.Fatalf("images: -platform %q: want os/arch", p)
		}
		s.platforms = append(s.platforms, *pl)
	}
	s.files, s.ldds, s.dirs, s.links = files, ldds, dirs, links
	s.entrypoint, s.cmd, s.env, s.labels = entrypoint, cmd, env, labels

	idx, err := build(s)
	if err != nil {
		log.Fatalf("images: %s: %v", ref, err)
	}
	if out != "" {
		if err := writeArchive(out, s, idx); err != nil {
			log.Fatalf("images: %s: %v", out, err)
		}
	}
	if push {
		if err := pushIndex(s, idx); err != nil {
			log.Fatalf("images: push %s: %v", ref, err)
		}
	}
	d, _ := idx.Digest()
	fmt.Printf("%s@%s (%s)\n", ref, d, strings.Join(platforms, ", "))
}

// build makes one image per platform and the index naming them.
func build(s spec) (v1.ImageIndex, error) {
	var adds []mutate.IndexAddendum
	for _, p := range s.platforms {
		img, err := image(s, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		pl := p
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	return mutate.AppendManifests(idx, adds...), nil
}

func image(s spec, p v1.Platform) (v1.Image, error) {
	entries := map[string]entry{}
	add := func(e entry) {
		e.target = path.Clean("/" + e.target)
		entries[e.target] = e
	}
	for _, f := range s.files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("-file %q: want SRC=DST", f)
		}
		src = strings.ReplaceAll(src, "{arch}", p.Architecture)
		if err := sameArch(src, p.Architecture); err != nil {
			return nil, err
		}
		add(entry{src: src, target: dst})
	}
	// -ldd copies this machine's binaries: into this machine's platform's
	// image only.
	host := p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH
	for _, l := range s.ldds {
		if !host {
			break
		}
		bin, dst, ok := strings.Cut(l, "=")
		if !ok {
			dst = bin
		}
		add(entry{src: bin, target: dst})
		libs, err := sharedLibs(bin)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			add(entry{src: lib, target: lib})
		}
	}
	for _, d := range s.dirs {
		dst, mode, _ := strings.Cut(d, "=")
		m := int64(0o755)
		if mode != "" {
			if _, err := fmt.Sscanf(mode, "%o", &m); err != nil {
				return nil, fmt.Errorf("-dir %q: mode: %v", d, err)
			}
		}
		add(entry{dir: true, mode: m, target: dst})
	}
	for _, l := range s.links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("-symlink %q: want DST=TARGET", l)
		}
		add(entry{link: target, target: dst})
	}
	body, err := layerTar(entries)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer}); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint, cf.Config.Cmd = s.entrypoint, s.cmd
	cf.Config.Env = s.env
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	if len(s.labels) > 0 {
		cf.Config.Labels = map[string]string{}
		for _, l := range s.labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("-label %q: want KEY=VALUE", l)
			}
			cf.Config.Labels[k] = v
		}
	}
	return mutate.ConfigFile(img, cf)
}

// sameArch refuses an ELF file built for another architecture than the
// platform's: an arm64 image with an amd64 binary fails only on the node.
func sameArch(file, arch string) error {
	f, err := elf.Open(file)
	if err != nil {
		return nil // not an ELF file (a script, a config): any platform
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
		"386": elf.EM_386, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV}[arch]
	if want != 0 && f.Machine != want {
		return fmt.Errorf("%s is built for %s, not %s", file, f.Machine, arch)
	}
	return nil
}

var lddPath = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// sharedLibs returns the absolute library paths `ldd bin` prints.
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v", bin, err)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(line))
		}
		if m := lddPath.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s listed no libraries", bin)
	}
	return libs, nil
}

// layerTar writes the entries, with every parent directory, sorted, owned
// by root, at the epoch.
func layerTar(entries map[string]entry) ([]byte, error) {
	for t := range entries {
		for d := path.Dir(t); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = entry{dir: true, mode: 0o755, target: d}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for t := range entries {
		names = append(names, t)
	}
	sort.Strings(names)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		h := &tar.Header{Name: strings.TrimPrefix(n, "/"), ModTime: epoch, Format: tar.FormatPAX}
		var body []byte
		switch {
		case e.dir:
			h.Typeflag, h.Mode, h.Name = tar.TypeDir, e.mode, h.Name+"/"
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		default:
			st, err := os.Stat(e.src) // follows symlinks: the image gets the file
			if err != nil {
				return nil, err
			}
			if !st.Mode().IsRegular() {
				return nil, fmt.Errorf("%s is not a regular file", e.src)
			}
			if body, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			// The mode is 0755 or 0644, not the build machine's umask's.
			mode := int64(0o644)
			if st.Mode().Perm()&0o111 != 0 {
				mode = 0o755
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, mode, int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// refs is the reference and its other tags.
func refs(s spec) []name.Tag {
	all := []name.Tag{s.ref}
	for _, t := range s.tags {
		all = append(all, s.ref.Context().Tag(t))
	}
	return all
}

// writeArchive writes an OCI image layout into a temporary directory, the
// index once per name (containerd's io.containerd.image.name, and the OCI
// ref.name, the tag), then tars it into out, replaced whole.
func writeArchive(out string, s spec, idx v1.ImageIndex) error {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, r := range refs(s) {
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          containerdName(r),
			"org.opencontainers.image.ref.name": r.TagStr(),
		})); err != nil {
			return err
		}
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch})
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), ModTime: epoch}); err != nil {
			return err
		}
		_, err = tw.Write(body)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

// pushIndex pushes the index under every name, with the credentials of
// the docker config (docker login, or $DOCKER_CONFIG).
func pushIndex(s spec, idx v1.ImageIndex) error {
	for _, r := range refs(s) {
		if err := remote.WriteIndex(r, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return err
		}
		log.Printf("images: pushed %s", r)
	}
	return nil
}

// containerdName is the name containerd gives a reference: Docker Hub's
// registry as docker.io (go-containerregistry says index.docker.io), so
// that a pod's "busybox:1" finds "docker.io/library/busybox:1".
func containerdName(r name.Tag) string {
	n := r.Name()
	if rest, ok := strings.CutPrefix(n, name.DefaultRegistry+"/"); ok {
		return "docker.io/" + rest
	}
	return n
}
