package memstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// files is a directory's regular files by relative path.
type files map[string][]byte

func readFiles(dir string) (files, error) {
	out := files{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
		return nil
	})
	return out, err
}

// writeTo makes dir hold exactly these files.
func (f files) writeTo(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for rel, b := range f {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (f files) equal(g files) bool {
	if len(f) != len(g) {
		return false
	}
	for k, v := range f {
		w, ok := g[k]
		if !ok || string(v) != string(w) {
			return false
		}
	}
	return true
}

func (f files) size() int64 {
	var n int64
	for _, b := range f {
		n += int64(len(b))
	}
	return n
}

func dirSize(dir string) int64 {
	f, err := readFiles(dir)
	if err != nil {
		return 0
	}
	return f.size()
}

func timeUnix(sec int64) time.Time { return time.Unix(sec, 0).UTC() }
