package membership

import (
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Clock is the time a state transfer runs on (FetchConfig.Clock,
// DonorConfig.Clock): when a donor counts as stalled, and when a broken
// connection is opened again. SystemClock is the machine's. A simulation
// passes a virtual one whose AfterFunc runs f on its own scheduler; with
// a transport that calls handlers on that scheduler too (rdma.MemFabric
// in Manual mode), a transfer then runs on one goroutine, the same on
// every run.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f once d has passed, on a goroutine other than the
	// caller's (or, on a simulation's clock, as a later step of its
	// scheduler), unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a call that a Clock's AfterFunc scheduled.
type Timer interface {
	// Stop cancels the call; it reports false if the call has run or
	// started already. It must not wait for a call that has started: a
	// transfer stops its timers while holding locks its calls take.
	Stop() bool
}

// SystemClock returns the machine's clock: time.Now and time.AfterFunc.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// reopenBackoff is the pause before each new queue pair to a peer whose
// connection broke (donor and joiner alike): jittered by half either way,
// from fetchReopenMin doubling up to fetchReopenMax.
type reopenBackoff struct {
	b *backoff.ExponentialBackOff
	// rng, if set, draws the jitter in place of the backoff's own source.
	rng *rand.Rand
}

func newReopenBackoff(rng *rand.Rand) *reopenBackoff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     fetchReopenMin,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         fetchReopenMax,
	}
	if rng != nil {
		b.RandomizationFactor = 0
	}
	b.Reset()
	return &reopenBackoff{b: b, rng: rng}
}

// next returns the next pause.
func (r *reopenBackoff) next() time.Duration {
	d := r.b.NextBackOff()
	if r.rng != nil {
		d = time.Duration(float64(d) * (0.5 + r.rng.Float64()))
	}
	return d
}

// reset starts the pauses over, after progress.
func (r *reopenBackoff) reset() { r.b.Reset() }
