package main

import "testing"

func TestMaxTransferRateTakesBytesWithDecimalOrBinarySuffixes(t *testing.T) {
	for in, want := range map[string]byteRate{
		"0": 0, "1048576": 1 << 20, "64Ki": 64 << 10, "10Mi": 10 << 20, "2Gi": 2 << 30, "1Ti": 1 << 40,
		"500k": 500_000, "500K": 500_000, "10M": 10_000_000, "2G": 2_000_000_000, "1T": 1_000_000_000_000,
	} {
		if got, err := parseByteRate(in); err != nil || got != want {
			t.Errorf("parseByteRate(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "M", "Mi", "-1", "1.5M", "10X", "10 M", "10MB", "10mi", "9999999999Ti"} {
		if got, err := parseByteRate(in); err == nil {
			t.Errorf("parseByteRate(%q) = %d, want an error", in, got)
		}
	}
}
