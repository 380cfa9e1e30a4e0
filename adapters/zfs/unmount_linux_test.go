package zfs

import "testing"

func TestOnlyTheHostRootAndWhatIsBelowItIsBelowIt(t *testing.T) {
	for _, c := range []struct {
		path, root string
		want       bool
	}{
		{"/host/var/lib/ferry/v", "/host", true},
		{"/host", "/host", true},
		{"/hostile/var/lib/ferry/v", "/host", false},
		{"/var/lib/ferry/v", "/host", false},
		{"/var/lib/ferry/v", "", false},
	} {
		if got := below(c.path, c.root); got != c.want {
			t.Errorf("below(%q, %q) = %v, want %v", c.path, c.root, got, c.want)
		}
	}
}
