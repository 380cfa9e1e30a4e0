package volume

import (
	"errors"
	"testing"
)

func TestCapacityRangeChoose(t *testing.T) {
	cases := []struct {
		name      string
		r         CapacityRange
		want      int64
		wantErr   error
		wantInval bool
	}{
		{"nothing set gives the default", CapacityRange{}, DefaultCapacity, nil, false},
		{"required is rounded up to a MiB", CapacityRange{RequiredBytes: MiB + 1}, 2 * MiB, nil, false},
		{"tiny required becomes the minimum", CapacityRange{RequiredBytes: 1}, MinCapacity, nil, false},
		{"exact MiB is kept", CapacityRange{RequiredBytes: 10 * GiB}, 10 * GiB, nil, false},
		{"limit only caps the default", CapacityRange{LimitBytes: 100 * MiB}, 100 * MiB, nil, false},
		{"limit only, above the default", CapacityRange{LimitBytes: 10 * GiB}, DefaultCapacity, nil, false},
		{"rounding beyond the limit", CapacityRange{RequiredBytes: MiB + 1, LimitBytes: MiB + 2}, 0, ErrOutOfRange, false},
		{"limit below the minimum", CapacityRange{LimitBytes: 1000}, 0, ErrOutOfRange, false},
		{"beyond the maximum", CapacityRange{RequiredBytes: MaxCapacity + 1}, 0, ErrOutOfRange, false},
		{"negative", CapacityRange{RequiredBytes: -1}, 0, nil, true},
		{"required above limit", CapacityRange{RequiredBytes: 2 * GiB, LimitBytes: GiB}, 0, nil, true},
	}
	for _, c := range cases {
		got, err := c.r.Choose()
		var inv *InvalidError
		switch {
		case c.wantInval:
			if !errors.As(err, &inv) {
				t.Errorf("%s: err = %v, want InvalidError", c.name, err)
			}
		case c.wantErr != nil:
			if !errors.Is(err, c.wantErr) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.wantErr)
			}
		case err != nil || got != c.want:
			t.Errorf("%s: Choose() = %d, %v; want %d", c.name, got, err, c.want)
		}
		if err == nil && !c.r.Fits(got) {
			t.Errorf("%s: the chosen size %d does not fit its own range", c.name, got)
		}
	}
}

func TestCapabilitySupportsSingleNodeFilesystemsOnly(t *testing.T) {
	ok := []Capability{{Mode: SingleNodeWriter}, {Mode: SingleNodeReaderOnly, FsType: "zfs"}, {Mode: SingleNodeMultiWriter, FsType: "ext4"}}
	bad := []Capability{{Block: true, Mode: SingleNodeWriter}, {Mode: MultiNodeMultiWriter}, {Mode: MultiNodeReaderOnly}, {Mode: AccessUnknown}, {Mode: SingleNodeWriter, FsType: "ntfs"}}
	for _, c := range ok {
		if s, why := c.Supported(); !s {
			t.Errorf("%+v refused: %s", c, why)
		}
	}
	for _, c := range bad {
		if s, why := c.Supported(); s || why == "" {
			t.Errorf("%+v accepted (or refused without a reason)", c)
		}
	}
}
