package skewclock

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSkewed checks the clock:
// readings at known elapsed times, no overflow over a century, and
// never a step backwards.
func TestSkewed(t *testing.T) {
	const year = 365 * 24 * time.Hour
	for _, tc := range []struct {
		offset  time.Duration
		drift   int
		elapsed time.Duration
		want    time.Duration
	}{
		{0, 0, 5 * time.Second, 5 * time.Second},
		{2 * time.Second, 0, 5 * time.Second, 7 * time.Second},
		{-1500 * time.Millisecond, 0, time.Second, -500 * time.Millisecond},
		{0, 100_000, 10 * time.Second, 11 * time.Second},
		{0, -500_000, 10 * time.Second, 5 * time.Second},
		{time.Second, 250_000, 1500 * time.Millisecond, time.Second + 1875*time.Millisecond},
		{0, MaxDriftPPM, 100 * year, 150 * year},
		{0, -MaxDriftPPM, 100 * year, 50 * year},
	} {
		if got := time.Duration(skewed(0, tc.offset, tc.drift, tc.elapsed)); got != tc.want {
			t.Errorf("offset %v, drift %d ppm, after %v: %v, want %v", tc.offset, tc.drift, tc.elapsed, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, drift := range []int{-MaxDriftPPM, -123_457, -1, 0, 1, 7, 333_333, MaxDriftPPM} {
		prev := skewed(1e18, -time.Second, drift, 0)
		var e time.Duration
		for range 100_000 {
			// Steps of a nanosecond across second boundaries, and
			// larger ones.
			if r.IntN(2) == 0 {
				e++
			} else {
				e += time.Duration(r.Int64N(int64(time.Second)))
			}
			now := skewed(1e18, -time.Second, drift, e)
			if now < prev {
				t.Fatalf("drift %d ppm: the clock went back from %d to %d at %v", drift, prev, now, e)
			}
			prev = now
		}
	}
}
