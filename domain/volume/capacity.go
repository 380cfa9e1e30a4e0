package volume

import "fmt"

// Capacity rules. Sizes are rounded up to whole MiB so that the quota ZFS
// enforces is exactly the size reported to Kubernetes.
const (
	MiB             int64 = 1 << 20
	GiB             int64 = 1 << 30
	DefaultCapacity       = GiB
	MinCapacity           = MiB
	MaxCapacity     int64 = 1 << 50 // 1 PiB: beyond any pool a node holds
)

// CapacityRange is the CSI capacity_range: zero means "not set".
type CapacityRange struct {
	RequiredBytes int64
	LimitBytes    int64
}

// Choose returns the size to provision for the range, or an error:
// InvalidError for negative or inverted bounds, ErrOutOfRange when no
// MiB-aligned size within [MinCapacity, MaxCapacity] satisfies the range.
func (r CapacityRange) Choose() (int64, error) {
	if r.RequiredBytes < 0 || r.LimitBytes < 0 {
		return 0, invalid("capacity_range", fmt.Sprintf("%d..%d", r.RequiredBytes, r.LimitBytes), "bytes must not be negative")
	}
	if r.LimitBytes > 0 && r.RequiredBytes > r.LimitBytes {
		return 0, invalid("capacity_range", fmt.Sprintf("%d..%d", r.RequiredBytes, r.LimitBytes), "required_bytes exceeds limit_bytes")
	}
	var size int64
	switch {
	case r.RequiredBytes > 0:
		if r.RequiredBytes > MaxCapacity {
			return 0, fmt.Errorf("%w: %d bytes requested, at most %d supported", ErrOutOfRange, r.RequiredBytes, MaxCapacity)
		}
		size = roundUp(max(r.RequiredBytes, MinCapacity))
	case r.LimitBytes > 0:
		size = min(DefaultCapacity, r.LimitBytes/MiB*MiB)
	default:
		size = DefaultCapacity
	}
	if size < MinCapacity || (r.LimitBytes > 0 && size > r.LimitBytes) {
		return 0, fmt.Errorf("%w: no size of whole MiB, at least %d bytes, fits %d..%d", ErrOutOfRange, MinCapacity, r.RequiredBytes, r.LimitBytes)
	}
	return size, nil
}

// Fits reports whether an existing volume of size bytes satisfies the range;
// CreateVolume uses it to tell a retried request from a conflicting one.
func (r CapacityRange) Fits(size int64) bool {
	return size >= r.RequiredBytes && (r.LimitBytes == 0 || size <= r.LimitBytes)
}

func roundUp(n int64) int64 { return (n + MiB - 1) / MiB * MiB }
