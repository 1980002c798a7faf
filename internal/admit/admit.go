// Package admit bounds the requests a service serves at once, by count
// and by the bytes they hold, so that a load beyond what it can carry is
// refused at once (with 503 and Retry-After, over HTTP) instead of
// queueing. The example services use it: a Metered is a Limiter that
// counts what it admits and refuses in a service's metrics, and serves
// its HTTP handlers.
package admit

import (
	"strconv"
	"sync"
	"time"
)

// Limiter admits requests up to its bounds. Its methods are safe for
// concurrent use.
type Limiter struct {
	maxRequests, maxBytes int

	mu struct {
		sync.Mutex
		// Invariant: 0 ≤ requests ≤ maxRequests, 0 ≤ bytes ≤ maxBytes.
		requests, bytes int
		// admitted counts the requests ever admitted.
		admitted uint64
	}
}

// New returns a Limiter that admits up to maxRequests requests holding
// up to maxBytes bytes together.
func New(maxRequests, maxBytes int) *Limiter {
	return &Limiter{maxRequests: maxRequests, maxBytes: maxBytes}
}

// Admit takes a place for a request that holds bytes, and reports
// whether there was one. A request admitted must be released with the
// same bytes.
func (l *Limiter) Admit(bytes int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.requests >= l.maxRequests || l.mu.bytes+bytes > l.maxBytes {
		return false
	}
	l.mu.requests++
	l.mu.bytes += bytes
	l.mu.admitted++
	return true
}

// Release gives back the place of a request admitted with bytes.
func (l *Limiter) Release(bytes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.requests--
	l.mu.bytes -= bytes
}

// Load returns the requests admitted and the bytes they hold.
func (l *Limiter) Load() (requests, bytes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.requests, l.mu.bytes
}

// Total returns how many requests were ever admitted.
func (l *Limiter) Total() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.admitted
}

// RetryAfter returns the value of a Retry-After header for d: whole
// seconds, rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	s := max((d+time.Second-1)/time.Second, 1)
	return strconv.FormatInt(int64(s), 10)
}
