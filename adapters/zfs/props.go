package zfs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ferry-csi/ferry/ports"
)

// userPropPrefix namespaces Ferry's metadata as ZFS user properties.
const userPropPrefix = "ferry.zfs.csi.io:"

// nativeProps are the native properties Ferry reads. `zfs get all` would
// miss guid and createtxg on zfs-fuse, so every property is named.
var nativeProps = []string{
	"type", "refquota", "refreservation", "referenced", "available", "used",
	"mountpoint", "guid", "createtxg", "creation",
	"compression", "recordsize", "atime",
}

// propList is the -o argument of every `zfs get`: the native properties and
// Ferry's metadata keys.
var propList = func() string {
	props := append([]string{}, nativeProps...)
	for _, k := range ports.MetadataKeys {
		props = append(props, userPropPrefix+k)
	}
	return strings.Join(props, ",")
}()

// readableProps are the allow-listed native properties reported back in
// VolumeInfo.Properties.
var readableProps = []string{"compression", "recordsize", "atime"}

// propRow is one dataset's properties from `zfs get`, and its Ferry
// metadata (user properties set locally on it, prefix stripped).
type propRow struct {
	name   string
	native map[string]string
	meta   map[string]string
}

// parseGet parses `zfs get -H -p -o name,property,value,source`. zfs-fuse
// has no `zfs list -p`, but this form is the same on both CLIs. Rows keep
// the order in which datasets first appear (zfs prints parents first and a
// dataset's snapshots after it, oldest first).
func parseGet(out []byte) ([]*propRow, error) {
	var rows []*propRow
	byName := map[string]*propRow{}
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("zfs get: want 4 tab-separated columns, got %d in %q", len(f), line)
		}
		name, prop, value, source := f[0], f[1], f[2], f[3]
		row := byName[name]
		if row == nil {
			row = &propRow{name: name, native: map[string]string{}, meta: map[string]string{}}
			byName[name] = row
			rows = append(rows, row)
		}
		if key, ok := strings.CutPrefix(prop, userPropPrefix); ok {
			// Snapshots inherit their dataset's user properties: only the
			// ones set on this object itself are its metadata.
			if source == "local" || strings.HasPrefix(source, "received") {
				row.meta[key] = value
			}
			continue
		}
		row.native[prop] = value
	}
	return rows, nil
}

func (p *propRow) int64(prop string) int64 {
	v, err := strconv.ParseInt(p.native[prop], 10, 64)
	if err != nil {
		return 0 // "-" and "none" mean no value
	}
	return v
}

func (p *propRow) uint64(prop string) uint64 {
	v, err := strconv.ParseUint(p.native[prop], 10, 64)
	if err != nil {
		return 0
	}
	return v
}
