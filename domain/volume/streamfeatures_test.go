package volume

import "testing"

func TestSendFeaturesAreWhatBothPoolsTakeAndNoneForARawStream(t *testing.T) {
	all := StreamFeatures{Compressed: true, LargeBlocks: true, Embedded: true}
	for _, c := range []struct {
		name             string
		sender, receiver StreamFeatures
		raw              bool
		want             StreamFeatures
	}{
		{"both pools take every feature", all, all, false, all},
		{"a receiver that takes none (zfs-fuse, or a peer that says nothing)", all, StreamFeatures{}, false, StreamFeatures{}},
		{"a sender that has none (zfs-fuse)", StreamFeatures{}, all, false, StreamFeatures{}},
		{"only what both have", StreamFeatures{Compressed: true, Embedded: true}, StreamFeatures{LargeBlocks: true, Embedded: true}, false, StreamFeatures{Embedded: true}},
		{"a raw stream gains nothing", all, all, true, StreamFeatures{}},
	} {
		if got := SendFeatures(c.sender, c.receiver, c.raw); got != c.want {
			t.Errorf("%s: SendFeatures = %+v, want %+v", c.name, got, c.want)
		}
	}
	if !(StreamFeatures{}).None() || all.None() {
		t.Error("None is wrong")
	}
}
