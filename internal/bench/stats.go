package bench

import (
	"math"
	"sort"
)

// Summary is the spread of one metric over the repetitions of one case on
// one path.
type Summary struct {
	N      int
	Median float64
	Min    float64
	Max    float64
	Sum    float64 // for counts of bad events, where the total matters
}

// Summarize returns the median, min and max of xs; N is 0 for no values.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	mid := len(s) / 2
	med := s[mid]
	if len(s)%2 == 0 {
		med = (s[mid-1] + s[mid]) / 2
	}
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return Summary{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1], Sum: sum}
}

// Ratio is value over baseline, or NaN when either is missing: a ratio to
// nothing must show as missing, never as 0 or Inf.
func Ratio(value, baseline Summary) float64 {
	if value.N == 0 || baseline.N == 0 || baseline.Median == 0 {
		return math.NaN()
	}
	return value.Median / baseline.Median
}

// Spread is (max-min)/median: how far apart the repetitions landed.
func (s Summary) Spread() float64 {
	if s.N < 2 || s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}
