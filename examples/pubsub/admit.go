package pubsub

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/convoy-gcs/convoy/internal/admit"
)

// errAtCapacity: the member serves as many requests (or bytes of
// publishes) as Options.MaxRequests and Options.MaxRequestBytes allow, or
// as many event streams as Options.MaxStreams: the request is refused
// with 503 and a Retry-After.
var errAtCapacity = errors.New("pubsub: member at capacity")

// Reasons of a refusal, the attribute "reason" of
// convoy.pubsub.refused.requests.
const (
	// reasonCapacity: a request beyond MaxRequests or MaxRequestBytes.
	reasonCapacity = "capacity"
	// reasonStreams: an event stream beyond MaxStreams.
	reasonStreams = "streams"
)

// The Reasons admission counts its refusals by.
var (
	capacity    = admit.NewReason(reasonCapacity)
	streamsFull = admit.NewReason(reasonStreams)
)

// admission bounds what a member serves at once, so that a load beyond
// what the group can carry is refused at once instead of queueing:
// requests (publishes, subscriptions, GET /topics) by count and by the
// bytes the publishes among them hold, each taking its place for as long
// as it is served, a publish before its body is read; and event streams,
// which last as long as their clients stay, by count, apart from the
// requests. GET /status takes no place. It counts what it admits and
// refuses in the service's metrics, made from Options.MeterProvider (the
// README's Metrics section lists them). Its methods are safe for
// concurrent use.
type admission struct {
	// requests bounds the requests, and counts the streams too.
	requests *admit.Metered
	// streams bounds the event streams; it counts no bytes.
	streams *admit.Limiter
}

func newAdmission(opts Options) (*admission, error) {
	requests, err := admit.NewMetered(opts.MaxRequests, opts.MaxRequestBytes, opts.MeterProvider, admit.Metrics{
		Scope:   "github.com/convoy-gcs/convoy/examples/pubsub",
		Prefix:  "convoy.pubsub",
		Refused: "Requests refused at once with 503 and Retry-After, by reason: capacity (MaxRequests or MaxRequestBytes reached), streams (an event stream beyond MaxStreams).",
		Bytes:   "Bytes the publishes being served hold, as admission counts them: at most MaxRequestBytes.",
		Streams: "Event streams being served: at most MaxStreams.",
	})
	if err != nil {
		return nil, fmt.Errorf("pubsub: metrics: %w", err)
	}
	return &admission{requests: requests, streams: admit.New(opts.MaxStreams, 0)}, nil
}

// admitStream takes a place for an event stream, or counts a refusal and
// returns false if there is none. A stream admitted must be released
// (releaseStream) once it ends.
func (a *admission) admitStream() bool {
	if !a.streams.Admit(0) {
		a.requests.Refuse(streamsFull)
		return false
	}
	a.requests.AddStreams(1)
	return true
}

// releaseStream gives back the place of a stream.
func (a *admission) releaseStream() {
	a.streams.Release(0)
	a.requests.AddStreams(-1)
}

// admitted wraps h, a handler of a request without a body to bound, so
// that it is served only with a place (see admission).
func (n *Node) admitted(h http.HandlerFunc) http.HandlerFunc {
	return n.admit.requests.Handler(h, capacity, n.refuse)
}

// admittedStream wraps h, the handler of an event stream, so that it is
// served only with a stream's place, held until h returns.
func (n *Node) admittedStream(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !n.admit.admitStream() {
			n.refuse(w)
			return
		}
		defer n.admit.releaseStream()
		h(w, r)
	}
}

// admitBody admits a publish, whose body of at most limit bytes holds
// its size: its declared length, or limit if it declares none. It
// answers 413 for a declared length above limit, and 503 with
// Retry-After when the member is at capacity; the caller calls release
// once it has answered.
func (n *Node) admitBody(w http.ResponseWriter, r *http.Request, limit int) (release func(), ok bool) {
	bytes, ok := admit.BodySize(r, limit)
	if !ok {
		n.writeError(w, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, r.ContentLength, limit))
		return nil, false
	}
	return n.admit.requests.AdmitHTTP(w, bytes, capacity, n.refuse)
}

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	n.writeError(w, fmt.Errorf("%w: %w", ErrUnavailable, errAtCapacity))
}
