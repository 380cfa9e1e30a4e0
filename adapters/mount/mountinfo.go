package mount

import (
	"fmt"
	"strings"
)

// entry is one line of /proc/<pid>/mountinfo.
type entry struct {
	mountPoint string
	source     string
	readOnly   bool
}

// parseMountInfo parses proc(5) mountinfo lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// field 5 is the mount point, field 6 the per-mount options, and after the
// " - " separator come the filesystem type and the source.
func parseMountInfo(data []byte) ([]entry, error) {
	var out []entry
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 {
			return nil, fmt.Errorf("malformed mountinfo line %q", line)
		}
		ro := false
		for _, o := range strings.Split(f[5], ",") {
			if o == "ro" {
				ro = true
			}
		}
		out = append(out, entry{mountPoint: unescape(f[4]), source: unescape(g[1]), readOnly: ro})
	}
	return out, nil
}

// unescape decodes the octal escapes (\040 for a space) the kernel writes.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}
