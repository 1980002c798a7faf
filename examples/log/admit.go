package sharedlog

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/convoy-gcs/convoy/internal/admit"
)

// errAtCapacity: the member serves as many requests (or bytes of
// appends) as Options.MaxRequests and Options.MaxRequestBytes allow: the
// request is refused with 503 and a Retry-After.
var errAtCapacity = errors.New("sharedlog: member at capacity")

// reasonCapacity is the reason of a refusal for MaxRequests or
// MaxRequestBytes.
const reasonCapacity = "capacity"

// capacity is the Reason admission counts its refusals by.
var capacity = admit.NewReason(reasonCapacity)

// newAdmission returns what bounds the requests a member serves at once,
// by count and by the bytes the appends among them hold, so that a load
// beyond what the group can carry is refused at once instead of
// queueing: every request but GET /status takes a place for as long as
// it is served, an append before its body is read. It counts what it
// admits and refuses in the service's metrics, made from
// Options.MeterProvider (the README's Metrics section lists them).
func newAdmission(opts Options) (*admit.Metered, error) {
	a, err := admit.NewMetered(opts.MaxRequests, opts.MaxRequestBytes, opts.MeterProvider, admit.Metrics{
		Scope:   "github.com/convoy-gcs/convoy/examples/log",
		Prefix:  "convoy.log",
		Refused: "Requests refused at once with 503 and Retry-After, by reason: capacity (MaxRequests or MaxRequestBytes reached).",
		Bytes:   "Bytes the appends being served hold, as admission counts them: at most MaxRequestBytes.",
	})
	if err != nil {
		return nil, fmt.Errorf("sharedlog: metrics: %w", err)
	}
	return a, nil
}

// admitted wraps h, a handler of a request without a body to bound, so
// that it is served only with a place (see newAdmission).
func (n *Node) admitted(h http.HandlerFunc) http.HandlerFunc {
	return n.admit.Handler(h, capacity, n.refuse)
}

// admitBody admits a request whose body of at most limit bytes holds
// twice its size (the body, then the command made of it): its declared
// length, or limit if it declares none. It answers 413 for a declared
// length above limit, and 503 with Retry-After when the member is at
// capacity; the caller calls release once it has answered.
func (n *Node) admitBody(w http.ResponseWriter, r *http.Request, limit int) (release func(), ok bool) {
	size, ok := admit.BodySize(r, limit)
	if !ok {
		n.writeError(w, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, r.ContentLength, limit))
		return nil, false
	}
	return n.admit.AdmitHTTP(w, appendCharge(size), capacity, n.refuse)
}

// appendCharge is what admission counts for an append of size bytes.
func appendCharge(size int) int { return 2 * size }

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	n.writeError(w, fmt.Errorf("%w: %w", ErrUnavailable, errAtCapacity))
}
