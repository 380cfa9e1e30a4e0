// Command imagetar writes a container image as a docker-archive tar
// (manifest.json, the config JSON and one layer tar), the form
// `ctr images import` reads, from files of this machine. Nothing is pulled.
//
//	imagetar -o out.tar -tag ferry:dev -entrypoint /usr/local/bin/ferry \
//	  -file bin/ferry=/usr/local/bin/ferry -ldd /usr/sbin/zfs -dir /var/run/zfs
//
// -entrypoint and -cmd are repeated once per word.
// -file SRC=DST copies a file (following symlinks) to DST in the image;
// -ldd BIN[=DST] copies BIN (to DST, or the same path) and every shared library `ldd BIN`
// lists, at the paths ldd prints; -dir makes an empty directory; -symlink
// DST=TARGET makes a symbolic link. The output is reproducible: fixed
// timestamps and owners, entries sorted.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

// entry is one thing in the layer.
type entry struct {
	src    string // file to copy; "" for a directory or symlink
	link   string // symlink target
	dir    bool
	mode   int64
	target string // path in the image, absolute
}

// epoch is every entry's timestamp: the tar does not change between builds.
var epoch = time.Unix(0, 0).UTC()

func main() {
	var files, ldds, dirs, links, entrypoint, cmd, env list
	out := flag.String("o", "", "output tar")
	tag := flag.String("tag", "", "image reference, e.g. ferry:dev")
	flag.Var(&files, "file", "SRC=DST: copy a file into the image (repeatable)")
	flag.Var(&ldds, "ldd", "BIN[=DST]: copy a dynamically linked binary and the libraries ldd lists (repeatable)")
	flag.Var(&dirs, "dir", "DST[=MODE]: an empty directory, mode in octal (repeatable)")
	flag.Var(&links, "symlink", "DST=TARGET: a symbolic link (repeatable)")
	flag.Var(&entrypoint, "entrypoint", "one entrypoint word (repeatable, in order)")
	flag.Var(&cmd, "cmd", "one default argument word (repeatable, in order)")
	flag.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable)")
	flag.Parse()
	if *out == "" || *tag == "" || len(entrypoint)+len(cmd) == 0 {
		log.Fatal("imagetar: -o, -tag and -entrypoint or -cmd are required")
	}

	entries := map[string]entry{}
	add := func(e entry) {
		e.target = path.Clean("/" + e.target)
		entries[e.target] = e
	}
	for _, f := range files {
		src, dst, ok := strings.Cut(f, "=")
		if !ok {
			log.Fatalf("imagetar: -file %q: want SRC=DST", f)
		}
		add(entry{src: src, target: dst})
	}
	for _, l := range ldds {
		bin, dst, ok := strings.Cut(l, "=")
		if !ok {
			dst = bin
		}
		add(entry{src: bin, target: dst})
		libs, err := sharedLibs(bin)
		if err != nil {
			log.Fatalf("imagetar: %v", err)
		}
		for _, lib := range libs {
			add(entry{src: lib, target: lib})
		}
	}
	for _, d := range dirs {
		dst, mode, _ := strings.Cut(d, "=")
		m := int64(0o755)
		if mode != "" {
			if _, err := fmt.Sscanf(mode, "%o", &m); err != nil {
				log.Fatalf("imagetar: -dir %q: mode: %v", d, err)
			}
		}
		add(entry{dir: true, mode: m, target: dst})
	}
	for _, l := range links {
		dst, target, ok := strings.Cut(l, "=")
		if !ok {
			log.Fatalf("imagetar: -symlink %q: want DST=TARGET", l)
		}
		add(entry{link: target, target: dst})
	}

	layer, err := layerTar(entries)
	if err != nil {
		log.Fatalf("imagetar: %v", err)
	}
	if err := writeArchive(*out, *tag, layer, entrypoint, cmd, env); err != nil {
		log.Fatalf("imagetar: %v", err)
	}
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
		if m := lddPath.FindStringSubmatch(line); m != nil {
			libs = append(libs, m[1])
		}
	}
	if len(libs) == 0 {
		return nil, fmt.Errorf("ldd %s listed no libraries", bin)
	}
	return libs, nil
}

// layerTar writes the entries, with every parent directory, sorted.
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
	for _, name := range names {
		e := entries[name]
		h := &tar.Header{Name: strings.TrimPrefix(name, "/"), ModTime: epoch, Format: tar.FormatPAX}
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
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, int64(st.Mode().Perm()&fs.ModePerm), int64(len(body))
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

// writeArchive writes the docker-archive: the layer as <digest>/layer.tar,
// the config as <digest>.json and manifest.json naming both and the tag.
func writeArchive(out, tag string, layer []byte, entrypoint, cmd, env []string) error {
	layerSum := sha256.Sum256(layer)
	layerHex := hex.EncodeToString(layerSum[:])
	if len(env) == 0 {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	config := map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Cmd":        cmd,
			"Env":        env,
		},
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": []string{"sha256:" + layerHex},
		},
	}
	configJSON, err := json.Marshal(config)
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(configJSON)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := layerHex + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{tag},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return err
	}

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, file := range []struct {
		name string
		body []byte
	}{{configName, configJSON}, {layerName, layer}, {"manifest.json", manifest}} {
		if strings.Contains(file.name, "/") {
			if err := tw.WriteHeader(&tar.Header{Name: path.Dir(file.name) + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: file.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(file.body)), ModTime: epoch}); err != nil {
			return err
		}
		if _, err := tw.Write(file.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}
