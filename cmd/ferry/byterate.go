package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteRate is a flag value in bytes per second: a number, or one with a
// decimal (k, M, G, T) or binary (Ki, Mi, Gi, Ti) suffix.
type byteRate int64

// minTransferRate is the lowest limit --max-transfer-rate accepts.
const minTransferRate byteRate = 64 << 10

var rateSuffixes = []struct {
	suffix string
	factor int64
}{
	// Binary suffixes first: "Mi" must not be read as "M" followed by "i".
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
}

func (r *byteRate) String() string { return strconv.FormatInt(int64(*r), 10) }

func (r *byteRate) Set(s string) error {
	v, err := parseByteRate(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

func parseByteRate(s string) (byteRate, error) {
	num, factor := s, int64(1)
	for _, sf := range rateSuffixes {
		if n, ok := strings.CutSuffix(s, sf.suffix); ok {
			num, factor = n, sf.factor
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a rate in bytes per second (e.g. 0, 1048576, 50M, 64Mi)", s)
	}
	if n > math.MaxInt64/factor {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return byteRate(n * factor), nil
}
