package volume

import (
	"path"
	"strings"
)

// DefaultKubeletDir is the kubelet's root directory unless it was moved
// (`--root-dir` of the kubelet, `--kubelet-dir` of `ferry daemon`).
const DefaultKubeletDir = "/var/lib/kubelet"

// MaxPathBytes bounds every path a node call may name: PATH_MAX on Linux.
const MaxPathBytes = 4096

// Target is a pod's target path, checked to lie strictly below the
// kubelet's directory. It is kept in three parts because that is how it is
// walked: Root is opened as it is (the node's own configuration), Parent is
// resolved below Root without following any symlink, and Name is the only
// component Ferry may create.
type Target struct {
	Root   string // the kubelet directory: absolute and clean
	Parent string // the target's parent relative to Root: "." or "pods/…"
	Name   string // the target's last component, never "." or ".."
}

// Path is the target as the kubelet spelled it (and as the mount table
// shows it, when Root holds no symlink).
func (t Target) Path() string { return path.Join(t.Root, t.Parent, t.Name) }

// CheckPath refuses a path that no kubelet sends and that could walk
// somewhere else than it says: empty, longer than MaxPathBytes, holding a
// NUL byte, a ".." component, or not in its clean form ("a//b", "a/./b",
// a trailing "/"). A relative path passes: whether one is acceptable is
// the caller's rule (ParseTarget refuses it). Nothing is rewritten: a
// rewritten path could name another pod's directory.
func CheckPath(field, p string) error {
	switch {
	case p == "":
		return invalidPath(field, p, "must not be empty")
	case len(p) > MaxPathBytes:
		return invalidPath(field, p, "longer than 4096 bytes")
	case strings.IndexByte(p, 0) >= 0:
		return invalidPath(field, p, "must not contain a NUL byte")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return invalidPath(field, p, `must not contain a ".." component`)
		}
	}
	if path.Clean(p) != p {
		return invalidPath(field, p, "must be a clean path (no \"//\", \".\" component or trailing \"/\")")
	}
	return nil
}

// ParseTarget accepts a target path only when CheckPath accepts it, it is
// absolute, and it lies strictly below root (the kubelet directory, itself
// absolute and clean). Symlinks are not this function's business: it does
// no I/O; the Mounter walks Parent refusing every symlink.
func ParseTarget(field, p, root string) (Target, error) {
	if !path.IsAbs(root) || path.Clean(root) != root {
		return Target{}, invalidPath("kubelet directory", root, "must be an absolute, clean path")
	}
	if err := CheckPath(field, p); err != nil {
		return Target{}, err
	}
	if !path.IsAbs(p) {
		return Target{}, invalidPath(field, p, "must be an absolute path")
	}
	prefix := root + "/"
	if root == "/" {
		prefix = "/"
	}
	rel, ok := strings.CutPrefix(p, prefix)
	if !ok || rel == "" {
		return Target{}, invalidPath(field, p, "must be below the kubelet directory "+root)
	}
	parent, name := path.Split(rel)
	parent = path.Clean("./" + parent)
	return Target{Root: root, Parent: parent, Name: name}, nil
}

// Below reports whether a path CheckPath accepted lies strictly below root.
func Below(p, root string) bool {
	_, err := ParseTarget("path", p, root)
	return err == nil
}

// invalidPath is invalid for paths: kubelet paths run to 150 bytes, so the
// bound is longer than for names, and NUL bytes are shown escaped.
func invalidPath(field, value, reason string) error {
	return &InvalidError{Field: field, Value: truncateTo(value, 256), Reason: reason}
}
