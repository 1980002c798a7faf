package paxos

import (
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"github.com/convoy-gcs/convoy/internal/admit"
)

// errAtCapacity: the member serves as many requests (or bytes of them)
// as Options.MaxRequests and Options.MaxRequestBytes allow (and a
// stream's request found no place within Options.RetryAfter), or as many
// streams as Options.MaxStreams: the request is refused with 503 and a
// Retry-After.
var errAtCapacity = errors.New("paxos: member at capacity")

// The values of the refusals' attributes.
const (
	apiHTTP   = "http"
	apiStream = "stream"
	// reasonCapacity: MaxRequests or MaxRequestBytes reached;
	// reasonStreams: a stream upgrade beyond MaxStreams.
	reasonCapacity = "capacity"
	reasonStreams  = "streams"
)

// The Reasons admission counts its refusals by, by api and reason.
var (
	httpCapacity   = admit.NewReason(reasonCapacity, attribute.String("api", apiHTTP))
	streamCapacity = admit.NewReason(reasonCapacity, attribute.String("api", apiStream))
	streamsFull    = admit.NewReason(reasonStreams, attribute.String("api", apiStream))
)

// newAdmission returns what bounds the requests a member serves at once,
// by count and by the bytes they hold, so that a load beyond what the
// group can carry is refused instead of queueing without bound: every KV
// request (reads included) takes a place for as long as it is served,
// and a stream's request takes its place, waiting up to
// Options.RetryAfter for one, before its frame is read. It
// counts what it admits and refuses, and the streams served, in the
// service's metrics, made from Options.MeterProvider (the README's
// Metrics section lists them with the library's).
func newAdmission(opts Options) (*admit.Metered, error) {
	a, err := admit.NewMetered(opts.MaxRequests, opts.MaxRequestBytes, opts.MeterProvider, admit.Metrics{
		Scope:   "github.com/convoy-gcs/convoy/examples/paxos",
		Prefix:  "convoy.kv",
		Refused: "Requests refused with 503 and Retry-After, by api (http, stream) and reason: capacity (MaxRequests or MaxRequestBytes reached; a stream's request after waiting RetryAfter for a place), streams (a stream upgrade beyond MaxStreams).",
		Bytes:   "Bytes the requests being served hold, as admission counts them: at most MaxRequestBytes.",
		Streams: "Streams being served: at most MaxStreams.",
		Waiting: "Stream requests waiting for a place (beyond MaxRequests or MaxRequestBytes), each for up to RetryAfter.",
	})
	if err != nil {
		return nil, fmt.Errorf("paxos: metrics: %w", err)
	}
	return a, nil
}

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	writeError(w, http.StatusServiceUnavailable, errAtCapacity.Error())
}
