package zfs

import (
	"context"
	"fmt"
	"strings"

	"github.com/ferry-csi/ferry/domain/volume"
	"github.com/ferry-csi/ferry/ports"
)

var _ ports.PoolFeatures = (*Store)(nil)

// detectFeatures reads what the pool sends and takes beyond plain
// streams from its feature flags (`zpool get all`; zfs-fuse's pools, of
// version 23, have none, and take plain streams only):
//   - compressed streams (`zfs send -c`, OpenZFS 0.7 and later) when the
//     pool knows both lz4 and zstd (zstd_compress, OpenZFS 2.0 and
//     later): a compressed block arrives as it is compressed, and a pool
//     that does not know its algorithm cannot take it;
//   - large blocks (`-L`) with feature large_blocks;
//   - embedded blocks (`-e`) with features embedded_data and lz4_compress
//     (an embedded block of a pool using lz4 is marked lz4 in the stream).
//
// A feature counts when "enabled" or "active". Features that cannot be
// read fail Open, as the encryption mode does: a node that guessed
// "plain" would send plain incrementals to copies that received large
// blocks whole, which refuse them.
func (s *Store) detectFeatures(ctx context.Context) (volume.StreamFeatures, error) {
	// No -H or -o: zfs-fuse's `zpool get` knows neither.
	out, err := s.run.zpool(ctx, "get", "all", s.cfg.Pool)
	if err != nil {
		return volume.StreamFeatures{}, fmt.Errorf("reading pool %s's features (zpool get all): %w", s.cfg.Pool, err)
	}
	return parseFeatures(string(out)), nil
}

// parseFeatures reads `zpool get all <pool>` output: a header, then
// "NAME PROPERTY VALUE SOURCE" rows.
func parseFeatures(out string) volume.StreamFeatures {
	on := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[1], "feature@") {
			on[strings.TrimPrefix(f[1], "feature@")] = f[2] == "enabled" || f[2] == "active"
		}
	}
	return volume.StreamFeatures{
		Compressed:  on["lz4_compress"] && on["zstd_compress"],
		LargeBlocks: on["large_blocks"],
		Embedded:    on["embedded_data"] && on["lz4_compress"],
	}
}

// StreamFeatures is what the pool sends and takes beyond plain streams
// (read at Open).
func (s *Store) StreamFeatures() volume.StreamFeatures { return s.features }

// featureFlags are the `zfs send` flags of f.
func featureFlags(f volume.StreamFeatures) []string {
	var out []string
	if f.LargeBlocks {
		out = append(out, "-L")
	}
	if f.Embedded {
		out = append(out, "-e")
	}
	if f.Compressed {
		out = append(out, "-c")
	}
	return out
}
