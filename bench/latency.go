package main

import (
	"math"
	"slices"
	"time"
)

// latencyQuantiles are the quantiles of latency every sample keeps: enough
// to draw the distribution (plotLatency) with its tail.
var latencyQuantiles = []float64{0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999}

// quantile is one point of a latency distribution: a fraction Q of the
// writes took at most Us microseconds.
type quantile struct {
	Q  float64 `json:"q"`
	Us float64 `json:"us"`
}

// distribution returns the latencyQuantiles of ds, in microseconds, as
// percentiles computes them; none for no latencies. It sorts ds.
func distribution(ds []time.Duration) []quantile {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	out := make([]quantile, len(latencyQuantiles))
	for i, q := range latencyQuantiles {
		out[i] = quantile{Q: q, Us: quantileOf(ds, q)}
	}
	return out
}

// quantileOf returns the smallest of sorted that at least a fraction q of
// them do not exceed, in microseconds. A product q·len(sorted) less than
// 1e-9 above a whole number counts as that number: 0.3 of 10 is the third
// (0.3·10 is 3.0000000000000004 in floating point), not the fourth.
func quantileOf(sorted []time.Duration, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return float64(sorted[max(i, 0)]) / float64(time.Microsecond)
}
