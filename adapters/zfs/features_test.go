package zfs

import (
	"slices"
	"testing"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

func TestPoolFeaturesAreReadFromZpoolGetAll(t *testing.T) {
	openzfs := `NAME  PROPERTY                       VALUE                          SOURCE
tank  size                           7.50G                          -
tank  comment                        a pool with spaces in it       local
tank  feature@async_destroy          enabled                        local
tank  feature@embedded_data          active                         local
tank  feature@large_blocks           enabled                        local
tank  feature@lz4_compress           active                         local
tank  feature@zstd_compress          enabled                        local
`
	if got, want := parseFeatures(openzfs), (volume.StreamFeatures{Compressed: true, LargeBlocks: true, Embedded: true}); got != want {
		t.Errorf("OpenZFS 2.x pool: %+v, want %+v", got, want)
	}
	// A pool without zstd (OpenZFS before 2.0, or the feature disabled)
	// could not take a zstd-compressed block: no compressed streams.
	noZstd := `NAME  PROPERTY                       VALUE                          SOURCE
tank  feature@embedded_data          active                         local
tank  feature@large_blocks           disabled                       local
tank  feature@lz4_compress           active                         local
tank  feature@zstd_compress          disabled                       local
`
	if got, want := parseFeatures(noZstd), (volume.StreamFeatures{Embedded: true}); got != want {
		t.Errorf("pool without zstd or large blocks: %+v, want %+v", got, want)
	}
	zfsFuse := `NAME         PROPERTY       VALUE       SOURCE
ferry-node1  size           240M        -
ferry-node1  version        23          default
`
	if got := parseFeatures(zfsFuse); !got.None() {
		t.Errorf("zfs-fuse pool: %+v, want none", got)
	}
}

func TestSendArgsAddOnlyWhatBothPoolsTake(t *testing.T) {
	snap := func(id volume.ID, name string) string { return "tank/ferry/" + string(id) + "@" + name }
	all := volume.StreamFeatures{Compressed: true, LargeBlocks: true, Embedded: true}
	req := ports.SendRequest{Volume: "v", From: "a", To: "b", Accept: all}
	if got, want := sendArgs(req, volume.SendVerdict{}, all, snap), []string{"send", "-L", "-e", "-c", "-i", "tank/ferry/v@a", "tank/ferry/v@b"}; !slices.Equal(got, want) {
		t.Errorf("both pools take all: %q, want %q", got, want)
	}
	req.Accept = volume.StreamFeatures{}
	if got, want := sendArgs(req, volume.SendVerdict{}, all, snap), []string{"send", "-i", "tank/ferry/v@a", "tank/ferry/v@b"}; !slices.Equal(got, want) {
		t.Errorf("a receiver that says nothing: %q, want %q", got, want)
	}
	req.Accept = all
	if got, want := sendArgs(req, volume.SendVerdict{Raw: true}, all, snap), []string{"send", "-w", "-i", "tank/ferry/v@a", "tank/ferry/v@b"}; !slices.Equal(got, want) {
		t.Errorf("a raw stream: %q, want %q", got, want)
	}
}
