// Package retry paces the clients of the example services, which send a
// request to the members in turn, each once a round, until one answers
// it: after a round in which none did, a client waits as a member asked
// (HTTP's Retry-After, the shortest asked in the round) or else by
// exponential backoff, with jitter either way, and goes round again.
//
//	p := retry.NewPacer(20*time.Millisecond, retry.MaxBackoff)
//	for {
//		for _, m := range members {
//			resp, err := try(m)
//			if done(resp, err) { return ... }
//			p.Asked(retry.After(resp.Header))
//		}
//		if err := p.Wait(ctx); err != nil { return ... }
//	}
package retry

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// MaxBackoff is the bound of the log and pub/sub clients' backoff (a
// member's Retry-After may ask for more).
const MaxBackoff = time.Second

// Pacer paces the rounds of one request. After a round in which a
// member asked to wait, Wait pauses the shortest time asked and up to
// half as long again at random, so that the clients refused together do
// not all come back together, and the backoff starts afresh; after a
// round in which none asked, it pauses by exponential backoff: from the
// initial pause, doubling each round up to its bound, each pause up to
// half shorter or longer at random. A Pacer is not safe for concurrent
// use.
type Pacer struct {
	b backoff.ExponentialBackOff
	// asked is the shortest pause a member asked for in this round (0:
	// none asked).
	asked time.Duration
}

// NewPacer returns a Pacer whose backoff starts at initial and doubles
// up to bound (before jitter).
func NewPacer(initial, bound time.Duration) *Pacer {
	p := &Pacer{b: backoff.ExponentialBackOff{
		InitialInterval:     initial,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         bound,
	}}
	p.b.Reset()
	return p
}

// Asked notes that a member asked to wait d before the next try (0: it
// did not ask).
func (p *Pacer) Asked(d time.Duration) {
	if d > 0 && (p.asked == 0 || d < p.asked) {
		p.asked = d
	}
}

// Next ends a round and returns the pause before the next.
func (p *Pacer) Next() time.Duration {
	d := p.asked
	p.asked = 0
	if d == 0 {
		return p.b.NextBackOff()
	}
	p.b.Reset()
	return d + rand.N(d/2+1)
}

// Wait ends a round and pauses (Next), or returns ctx's error once ctx
// ends first.
func (p *Pacer) Wait(ctx context.Context) error {
	t := time.NewTimer(p.Next())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// After returns the pause a response's Retry-After header asks for: a
// number of seconds or a date (0: none, or one that cannot be read).
func After(h http.Header) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
