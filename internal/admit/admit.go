// Package admit bounds the requests a service serves at once, by count
// and by the bytes they hold, so that a load beyond what it can carry is
// refused (with 503 and Retry-After, over HTTP) instead of queueing
// without bound. A request either is refused at once (Admit) or waits,
// for a bounded time and in turn with the others waiting, for a place
// to free (Wait), as a stream of requests does. The example services use
// it: a Metered is a Limiter that counts what it admits and refuses in a
// service's metrics, and serves its HTTP handlers.
package admit

import (
	"context"
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
		// waiting holds the requests waiting for a place (Wait), first
		// come first: each is admitted, and its ready closed, as soon as
		// it fits and every request before it was admitted.
		waiting []*waiter
	}
}

// waiter is a request waiting for a place.
type waiter struct {
	bytes int
	ready chan struct{}
}

// New returns a Limiter that admits up to maxRequests requests holding
// up to maxBytes bytes together.
func New(maxRequests, maxBytes int) *Limiter {
	return &Limiter{maxRequests: maxRequests, maxBytes: maxBytes}
}

// Admit takes a place for a request that holds bytes, and reports
// whether there was one. A place that requests waiting in Wait are owed
// is not free: while any waits, Admit refuses. A request admitted must be
// released with the same bytes.
func (l *Limiter) Admit(bytes int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.mu.waiting) > 0 || !l.fitsLocked(bytes) {
		return false
	}
	l.takeLocked(bytes)
	return true
}

// Wait takes a place for a request that holds bytes, waiting for one
// until ctx ends if there is none, after the requests that were waiting
// before it; it reports whether the request was admitted. A request that
// holds more than the Limiter's bytes is refused at once. A request
// admitted must be released with the same bytes.
func (l *Limiter) Wait(ctx context.Context, bytes int) bool {
	l.mu.Lock()
	if bytes > l.maxBytes || l.maxRequests <= 0 {
		l.mu.Unlock()
		return false
	}
	if len(l.mu.waiting) == 0 && l.fitsLocked(bytes) {
		l.takeLocked(bytes)
		l.mu.Unlock()
		return true
	}
	w := &waiter{bytes: bytes, ready: make(chan struct{})}
	l.mu.waiting = append(l.mu.waiting, w)
	l.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-w.ready: // admitted as ctx ended
		return true
	default:
	}
	for i, o := range l.mu.waiting {
		if o == w {
			l.mu.waiting = append(l.mu.waiting[:i], l.mu.waiting[i+1:]...)
			break
		}
	}
	// The requests behind w may fit where it did not.
	l.admitWaitingLocked()
	return false
}

// Release gives back the place of a request admitted with bytes, to the
// requests waiting for one first.
func (l *Limiter) Release(bytes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.requests--
	l.mu.bytes -= bytes
	l.admitWaitingLocked()
}

// fitsLocked reports whether a request that holds bytes fits beside the
// ones admitted. REQUIRES: l.mu held.
func (l *Limiter) fitsLocked(bytes int) bool {
	return l.mu.requests < l.maxRequests && l.mu.bytes+bytes <= l.maxBytes
}

// takeLocked admits a request that holds bytes. REQUIRES: l.mu held, and
// the request fits.
func (l *Limiter) takeLocked(bytes int) {
	l.mu.requests++
	l.mu.bytes += bytes
	l.mu.admitted++
}

// admitWaitingLocked admits the waiting requests, first come first,
// while the first fits. REQUIRES: l.mu held.
func (l *Limiter) admitWaitingLocked() {
	for len(l.mu.waiting) > 0 && l.fitsLocked(l.mu.waiting[0].bytes) {
		w := l.mu.waiting[0]
		l.mu.waiting[0] = nil
		l.mu.waiting = l.mu.waiting[1:]
		l.takeLocked(w.bytes)
		close(w.ready)
	}
}

// Load returns the requests admitted and the bytes they hold.
func (l *Limiter) Load() (requests, bytes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.requests, l.mu.bytes
}

// Waiting returns how many requests wait for a place (Wait).
func (l *Limiter) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.mu.waiting)
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
