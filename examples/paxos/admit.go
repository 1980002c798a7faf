package paxos

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// errAtCapacity: the member serves as many requests (or bytes of them)
// as Options.MaxRequests and Options.MaxRequestBytes allow, or as many
// streams as Options.MaxStreams: the request is refused with 503 and a
// Retry-After.
var errAtCapacity = errors.New("paxos: member at capacity")

// admission bounds the requests a member serves at once, by count and by
// the bytes they hold, so that a load beyond what the group can carry is
// refused at once instead of queueing: every KV request (reads included)
// takes a place for as long as it is served, and a stream's request takes
// its place before its frame is read. Its methods are safe for concurrent
// use.
type admission struct {
	maxRequests, maxBytes int
	m                     *metrics

	mu struct {
		sync.Mutex
		// Invariant: 0 ≤ requests ≤ maxRequests, 0 ≤ bytes ≤ maxBytes.
		requests, bytes int
		// admitted counts the requests ever admitted.
		admitted uint64
	}
}

func newAdmission(maxRequests, maxBytes int, m *metrics) *admission {
	return &admission{maxRequests: maxRequests, maxBytes: maxBytes, m: m}
}

// admit takes a place for a request that holds bytes (see Options.
// MaxRequestBytes), or counts a refusal and returns false if there is
// none (api labels the refusal's metric). A request admitted must be
// released with the same bytes.
func (a *admission) admit(api string, bytes int) bool {
	a.mu.Lock()
	ok := a.mu.requests < a.maxRequests && a.mu.bytes+bytes <= a.maxBytes
	if ok {
		a.mu.requests++
		a.mu.bytes += bytes
		a.mu.admitted++
	}
	a.mu.Unlock()
	if !ok {
		a.m.refuse(api, reasonCapacity)
		return false
	}
	a.m.admitted(1, bytes)
	return true
}

// release gives back the place of a request admitted with bytes.
func (a *admission) release(bytes int) {
	a.mu.Lock()
	a.mu.requests--
	a.mu.bytes -= bytes
	a.mu.Unlock()
	a.m.admitted(-1, -bytes)
}

// total returns how many requests were ever admitted.
func (a *admission) total() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.admitted
}

// load returns the requests admitted and their bytes.
func (a *admission) load() (requests, bytes int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.requests, a.mu.bytes
}

// retryAfterHeader returns the value of a Retry-After header for d: whole
// seconds, rounded up, at least 1.
func retryAfterHeader(d time.Duration) string {
	s := max((d+time.Second-1)/time.Second, 1)
	return strconv.FormatInt(int64(s), 10)
}

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", retryAfterHeader(n.opts.RetryAfter))
	writeError(w, http.StatusServiceUnavailable, errAtCapacity.Error())
}
