package main

import "testing"

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}

// The interval is reproducible (fixed seed), contains the median and lies
// within min-max.
func TestBootstrapMedian(t *testing.T) {
	xs := []float64{0.70, 0.75, 0.77, 0.86, 0.72, 0.75, 0.77}
	s := summarise(xs)
	lo, hi := bootstrapMedian(xs, 0.9)
	if lo != s.lo || hi != s.hi {
		t.Fatalf("two bootstraps of the same rounds differ: %v-%v and %v-%v", s.lo, s.hi, lo, hi)
	}
	if !(s.min <= s.lo && s.lo <= s.median && s.median <= s.hi && s.hi <= s.max) {
		t.Fatalf("want min <= lo <= median <= hi <= max, got %+v", s)
	}
	if one := summarise([]float64{0.9}); one.lo != 0.9 || one.hi != 0.9 {
		t.Fatalf("one round: %+v", one)
	}
}
