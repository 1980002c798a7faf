package paxos

import (
	"errors"
	"net/http"

	"github.com/convoy-gcs/convoy/internal/admit"
)

// errAtCapacity: the member serves as many requests (or bytes of them)
// as Options.MaxRequests and Options.MaxRequestBytes allow, or as many
// streams as Options.MaxStreams: the request is refused with 503 and a
// Retry-After.
var errAtCapacity = errors.New("paxos: member at capacity")

// admission bounds the requests a member serves at once, by count and by
// the bytes they hold (admit.Limiter), so that a load beyond what the
// group can carry is refused at once instead of queueing: every KV
// request (reads included) takes a place for as long as it is served,
// and a stream's request takes its place before its frame is read. It
// counts what it admits and refuses in the service's metrics. Its
// methods are safe for concurrent use.
type admission struct {
	*admit.Limiter
	m *metrics
}

func newAdmission(maxRequests, maxBytes int, m *metrics) *admission {
	return &admission{Limiter: admit.New(maxRequests, maxBytes), m: m}
}

// admit takes a place for a request that holds bytes (see Options.
// MaxRequestBytes), or counts a refusal and returns false if there is
// none (api labels the refusal's metric). A request admitted must be
// released with the same bytes.
func (a *admission) admit(api string, bytes int) bool {
	if !a.Admit(bytes) {
		a.m.refuse(api, reasonCapacity)
		return false
	}
	a.m.admitted(1, bytes)
	return true
}

// release gives back the place of a request admitted with bytes.
func (a *admission) release(bytes int) {
	a.Release(bytes)
	a.m.admitted(-1, -bytes)
}

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	writeError(w, http.StatusServiceUnavailable, errAtCapacity.Error())
}
