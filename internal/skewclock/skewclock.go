// Package skewclock makes clocks for convoy.Config.Clock that run off
// the machine's, to test a group under clock skew: set off by an offset,
// and gaining or losing a number of parts per million. "convoy node"
// (-clock-offset, -clock-drift-ppm) and the fault campaign's group
// members use it.
package skewclock

import "time"

// Bounds of a clock's settings.
const (
	// MaxOffset: a clock set off by more than a day is a mistake, not a
	// test of skew.
	MaxOffset = 24 * time.Hour
	// MaxDriftPPM keeps a drifting clock between half and one and a half
	// times the speed of time, so that it never stands still and
	// timeouts measured on it stay within a factor of two.
	MaxDriftPPM = 500_000
)

// New returns a clock for convoy.Config.Clock, in nanoseconds since the
// Unix epoch, that reads the machine's time plus offset now and then
// advances by the monotonic clock, gaining driftPPM microseconds a
// second (losing them, if negative). With a zero offset and drift it is
// the library's default clock. The settings must be within MaxOffset and
// MaxDriftPPM.
func New(offset time.Duration, driftPPM int) func() int64 {
	start := time.Now()
	base := start.UnixNano()
	return func() int64 { return skewed(base, offset, driftPPM, time.Since(start)) }
}

// skewed is the reading of a clock started at base (nanoseconds), set
// off by offset and drifting by driftPPM, after elapsed. For a driftPPM
// within ±MaxDriftPPM it never decreases as elapsed grows, and it cannot
// overflow for an elapsed of centuries.
func skewed(base int64, offset time.Duration, driftPPM int, elapsed time.Duration) int64 {
	e, d := int64(elapsed), int64(driftPPM)
	// e·d/10⁶, split so that it cannot overflow: the whole seconds of e
	// times d microseconds, plus the rest of e times d parts per million.
	sec, rest := e/int64(time.Second), e%int64(time.Second)
	return base + int64(offset) + e + sec*d*int64(time.Microsecond) + rest*d/1_000_000
}
