package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTargetAcceptsCleanAbsolutePathsBelowTheKubeletDirOnly(t *testing.T) {
	const root = "/var/lib/kubelet"
	long := root + "/" + strings.Repeat("a/", (MaxPathBytes-len(root))/2)
	long = long[:MaxPathBytes-1] + "b"
	cases := []struct {
		what, path string
		want       Target
		ok         bool
	}{
		{"a kubelet pod target", root + "/pods/uid/volumes/kubernetes.io~csi/pv/mount", Target{root, "pods/uid/volumes/kubernetes.io~csi/pv", "mount"}, true},
		{"a direct child", root + "/t", Target{root, ".", "t"}, true},
		{"exactly 4096 bytes", long, Target{}, true},
		{"4097 bytes", long + "c", Target{}, false},
		{"a .. component", root + "/pods/../../../etc", Target{}, false},
		{"a trailing ..", root + "/pods/..", Target{}, false},
		{"a NUL byte", root + "/pods/x\x00y", Target{}, false},
		{"a relative path", "pods/uid/mount", Target{}, false},
		{"the kubelet dir itself", root, Target{}, false},
		{"a sibling sharing the prefix", root + "-evil/pods/x", Target{}, false},
		{"outside", "/etc/x", Target{}, false},
		{"a trailing slash", root + "/pods/x/", Target{}, false},
		{"a double slash", root + "//pods/x", Target{}, false},
		{"a dot component", root + "/./pods/x", Target{}, false},
		{"empty", "", Target{}, false},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			got, err := ParseTarget("target_path", c.path, root)
			if !c.ok {
				var inv *InvalidError
				if !errors.As(err, &inv) {
					t.Fatalf("ParseTarget(%.80q) = %+v, %v; want an InvalidError", c.path, got, err)
				}
				if len(err.Error()) > 512 {
					t.Fatalf("error is %d bytes: hostile input must not flood logs", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTarget(%.80q): %v", c.path, err)
			}
			if got.Path() != c.path {
				t.Fatalf("Path() = %q, want %q", got.Path(), c.path)
			}
			if c.want != (Target{}) && got != c.want {
				t.Fatalf("ParseTarget = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseTargetUnderTheFilesystemRoot(t *testing.T) {
	got, err := ParseTarget("target_path", "/a/b", "/")
	if err != nil || got != (Target{"/", "a", "b"}) {
		t.Fatalf("ParseTarget(/a/b, /) = %+v, %v", got, err)
	}
	if _, err := ParseTarget("target_path", "/x", "relative/root"); err == nil {
		t.Fatal("a relative kubelet directory was accepted")
	}
}

func TestCheckPathRefusesTraversalButLeavesRelativePathsToTheCaller(t *testing.T) {
	for _, p := range []string{"some/path", "/abs/path", "/"} {
		if err := CheckPath("volume_path", p); err != nil {
			t.Errorf("CheckPath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range []string{"../etc", "a/../../b", "/a/..", "a\x00b", "a//b", "", strings.Repeat("x", MaxPathBytes+1)} {
		if err := CheckPath("volume_path", p); err == nil {
			t.Errorf("CheckPath(%.40q) accepted it", p)
		}
	}
}
