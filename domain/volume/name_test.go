package volume

import (
	"errors"
	"strings"
	"testing"
)

func TestParseIDAcceptsSafeNamesAndRefusesHostileOnes(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{"pvc-3f2a9c1e-0b7d-4c55-9a1e-2b9f0c7d6e11", true},
		{"sanity-node-full-6F2A", true},
		{"a", true},
		{"v1.2_3", true},
		{"", false},
		{"../../etc/passwd", false},
		{"..", false},
		{"a..b", false},
		{"pool/other", false},
		{"vol@snap", false},
		{"vol;rm -rf /", false},
		{"$(reboot)", false},
		{"`id`", false},
		{"with space", false},
		{"tab\tname", false},
		{"nul\x00byte", false},
		{"-leading-dash", false},
		{".hidden", false},
		{"ünïcode", false},
		{strings.Repeat("a", MaxNameLength), true},
		{strings.Repeat("a", MaxNameLength+1), false},
		{strings.Repeat("x", 10*1024), false},
	}
	for _, c := range cases {
		id, err := ParseID("name", c.in)
		if c.ok != (err == nil) {
			t.Errorf("ParseID(%.40q) error = %v, want ok=%v", c.in, err, c.ok)
		}
		var inv *InvalidError
		if err != nil && !errors.As(err, &inv) {
			t.Errorf("ParseID(%.40q) error %T is not an InvalidError", c.in, err)
		}
		if err != nil && len(err.Error()) > 400 {
			t.Errorf("ParseID error for a %d-byte name is %d bytes long: hostile input must not flood logs", len(c.in), len(err.Error()))
		}
		if c.ok && string(id) != c.in {
			t.Errorf("ParseID(%q) = %q", c.in, id)
		}
	}
}

func TestSnapshotIDsRoundTripAndStayApartFromReplicationSnapshots(t *testing.T) {
	ref := SnapshotRef{Volume: "pvc-1", Name: "snap-1"}
	got, err := ParseSnapshotID("snapshot_id", ref.ID())
	if err != nil || got != ref {
		t.Fatalf("ParseSnapshotID(%q) = %+v, %v", ref.ID(), got, err)
	}
	if ref.StoreName() != "csi-snap-1" {
		t.Fatalf("StoreName = %q", ref.StoreName())
	}
	if back, ok := SnapshotRefFromStore("pvc-1", ref.StoreName(), ""); !ok || back != ref {
		t.Fatalf("SnapshotRefFromStore = %+v, %v", back, ok)
	}
	if _, ok := SnapshotRefFromStore("pvc-1", "ferry-12", ""); ok {
		t.Fatal("a replication snapshot was taken for a CSI snapshot")
	}
	long := SnapshotRef{Volume: "pvc-1", Name: strings.Repeat("s", MaxSnapshotNameLength)}
	if n := long.StoreName(); len(n) > MaxStoreSnapshotName || !strings.HasPrefix(n, "csi--") {
		t.Fatalf("a 128-byte name is stored as %q (%d bytes)", n, len(n))
	}
	if back, ok := SnapshotRefFromStore("pvc-1", long.StoreName(), long.Name); !ok || back != long {
		t.Fatalf("a long name does not come back from its recorded name: %+v %v", back, ok)
	}
	if _, ok := SnapshotRefFromStore("pvc-1", long.StoreName(), "other"); ok {
		t.Fatal("a recorded name that does not match the store name was believed")
	}
	alias := SnapshotRef{Volume: "pvc-1", Name: "h-" + Digest(long.Name)}
	if alias.StoreName() == long.StoreName() {
		t.Fatalf("short name %q aliases the hashed store name of a long one", alias.Name)
	}
	for _, bad := range []string{"", "pvc-1", "pvc-1@", "@snap", "a@b@c", "../x@y", "pvc-1@../../z"} {
		if _, err := ParseSnapshotID("snapshot_id", bad); err == nil {
			t.Errorf("ParseSnapshotID(%q) accepted", bad)
		}
	}
}

func TestOnlyNamesStoreNameGivesAreSnapshotStoreNames(t *testing.T) {
	long := SnapshotRef{Volume: "v", Name: strings.Repeat("s", 100)}
	for _, name := range []string{
		SnapshotRef{Volume: "v", Name: "snap-1"}.StoreName(),
		long.StoreName(),
		"csi-a.b_c",
	} {
		if !IsSnapshotStoreName(name) {
			t.Errorf("IsSnapshotStoreName(%q) = false, want true", name)
		}
	}
	for _, name := range []string{
		"", "csi-", "csi--", "ferry-12", "snap", "csi-../x", "csi-a/b", "csi-a@b", "csi- a", "csi-.a",
		"csi--" + strings.Repeat("A", 32), "csi--" + strings.Repeat("a", 31), "csi--" + strings.Repeat("a", 33),
		"csi-" + strings.Repeat("s", 45), // longer than StoreName ever gives
	} {
		if IsSnapshotStoreName(name) {
			t.Errorf("IsSnapshotStoreName(%q) = true, want false", name)
		}
	}
}
