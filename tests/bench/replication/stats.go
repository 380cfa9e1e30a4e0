package main

import (
	"math/rand/v2"
	"slices"
)

// median of xs (the mean of the two middle values for an even count).
func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// bootstrapSeed makes the interval reproducible: the same rounds always
// give the same interval.
const bootstrapSeed = 15

// bootstrapMedian returns the percentile bootstrap interval of the median
// at level (0.9: the 5th and 95th percentiles of the medians of 10000
// resamples with replacement).
func bootstrapMedian(xs []float64, level float64) (lo, hi float64) {
	const resamples = 10000
	if len(xs) == 0 {
		return 0, 0
	}
	rng := rand.New(rand.NewPCG(bootstrapSeed, bootstrapSeed))
	meds := make([]float64, resamples)
	sample := make([]float64, len(xs))
	for i := range meds {
		for j := range sample {
			sample[j] = xs[rng.IntN(len(xs))]
		}
		meds[i] = median(sample)
	}
	slices.Sort(meds)
	tail := (1 - level) / 2
	return meds[int(tail*float64(resamples))], meds[int((1-tail)*float64(resamples))-1]
}

// spread summarises per-round ratios.
type spread struct {
	median, min, max, lo, hi float64
}

func summarise(xs []float64) spread {
	s := spread{median: median(xs), min: slices.Min(xs), max: slices.Max(xs)}
	s.lo, s.hi = bootstrapMedian(xs, 0.9)
	return s
}
