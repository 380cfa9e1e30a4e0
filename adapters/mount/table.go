package mount

import (
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/ferry-csi/ferry/ports"
)

// Table is the mount table of this process's mount namespace: the
// ports.MountTable the controller reads.
type Table struct {
	// MountInfo is the mount table to read; empty means /proc/self/mountinfo.
	MountInfo string
	// HostRoot is where the host's tools are mounted in this container
	// (--host-root; "" for none). Mounts at it or below it are not in the
	// table: the host's zfs, run there, mounts a dataset at its
	// mountpoint below it, and the mount shows at the dataset's own
	// mountpoint too (the same directory, shared): the view below the
	// host root is no other user of the volume.
	HostRoot string
}

var _ ports.MountTable = Table{}

func (t Table) entries() ([]entry, error) {
	file := t.MountInfo
	if file == "" {
		file = "/proc/self/mountinfo"
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	entries, err := parseMountInfo(data)
	if err != nil || t.HostRoot == "" {
		return entries, err
	}
	return slices.DeleteFunc(entries, func(e entry) bool { return Below(e.mountPoint, t.HostRoot) }), nil
}

// Below reports whether path is dir or lies below it (both absolute and
// clean; "/" holds everything).
func Below(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// MountAt reads the mount table for the topmost mount at target.
func (t Table) MountAt(target string) (ports.Mount, bool, error) {
	entries, err := t.entries()
	if err != nil {
		return ports.Mount{}, false, err
	}
	var found *entry
	for i := range entries {
		if entries[i].mountPoint == target {
			found = &entries[i] // later lines are mounted on top
		}
	}
	if found == nil {
		return ports.Mount{}, false, nil
	}
	return ports.Mount{Source: found.source, ReadOnly: found.readOnly}, true, nil
}

// MountsOf lists the mount points whose source is source.
func (t Table) MountsOf(source string) ([]string, error) {
	entries, err := t.entries()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.source == source {
			out = append(out, e.mountPoint)
		}
	}
	sort.Strings(out)
	return out, nil
}
