package pubsub

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy/internal/admit"
)

// errAtCapacity: the member serves as many requests (or bytes of
// publishes) as Options.MaxRequests and Options.MaxRequestBytes allow, or
// as many event streams as Options.MaxStreams: the request is refused
// with 503 and a Retry-After.
var errAtCapacity = errors.New("pubsub: member at capacity")

// admission bounds what a member serves at once, so that a load beyond
// what the group can carry is refused at once instead of queueing:
// requests (publishes, subscriptions, GET /topics) by count and by the
// bytes the publishes among them hold, each taking its place for as long
// as it is served, a publish before its body is read; and event streams,
// which last as long as their clients stay, by count, apart from the
// requests. GET /status takes no place. It counts what it admits and
// refuses in the service's metrics. Its methods are safe for concurrent
// use.
type admission struct {
	requests *admit.Limiter
	// streams bounds the event streams; it counts no bytes.
	streams *admit.Limiter
	m       *metrics
}

func newAdmission(opts Options, m *metrics) *admission {
	return &admission{
		requests: admit.New(opts.MaxRequests, opts.MaxRequestBytes),
		streams:  admit.New(opts.MaxStreams, 0),
		m:        m,
	}
}

// admit takes a place for a request that holds bytes, or counts a
// refusal and returns false if there is none. A request admitted must be
// released with the same bytes.
func (a *admission) admit(bytes int) bool {
	if !a.requests.Admit(bytes) {
		a.m.refuse(a.m.capacity)
		return false
	}
	a.m.admitted(1, bytes)
	return true
}

// release gives back the place of a request admitted with bytes.
func (a *admission) release(bytes int) {
	a.requests.Release(bytes)
	a.m.admitted(-1, -bytes)
}

// admitStream takes a place for an event stream, or counts a refusal and
// returns false if there is none. A stream admitted must be released
// (releaseStream) once it ends.
func (a *admission) admitStream() bool {
	if !a.streams.Admit(0) {
		a.m.refuse(a.m.streamsFull)
		return false
	}
	a.m.streams.Add(context.Background(), 1)
	return true
}

// releaseStream gives back the place of a stream.
func (a *admission) releaseStream() {
	a.streams.Release(0)
	a.m.streams.Add(context.Background(), -1)
}

// admitted wraps h, a handler of a request without a body to bound, so
// that it is served only with a place (see admission).
func (n *Node) admitted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !n.admit.admit(0) {
			n.refuse(w)
			return
		}
		defer n.admit.release(0)
		h(w, r)
	}
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
	if r.ContentLength > int64(limit) {
		n.writeError(w, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, r.ContentLength, limit))
		return nil, false
	}
	bytes := limit
	if r.ContentLength >= 0 {
		bytes = int(r.ContentLength)
	}
	if !n.admit.admit(bytes) {
		n.refuse(w)
		return nil, false
	}
	return func() { n.admit.release(bytes) }, true
}

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	n.writeError(w, fmt.Errorf("%w: %w", ErrUnavailable, errAtCapacity))
}

// Reasons of a refusal, the attribute "reason" of
// convoy.pubsub.refused.requests.
const (
	// reasonCapacity: a request beyond MaxRequests or MaxRequestBytes.
	reasonCapacity = "capacity"
	// reasonStreams: an event stream beyond MaxStreams.
	reasonStreams = "streams"
)

// metrics are the service's otel instruments, made once per Node from
// Options.MeterProvider (the README's Metrics section lists them).
type metrics struct {
	refused                   metric.Int64Counter
	capacity, streamsFull     []metric.AddOption
	admittedReqs, admittedBts metric.Int64UpDownCounter
	streams                   metric.Int64UpDownCounter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/convoy-gcs/convoy/examples/pubsub")
	var ms metrics
	var err error
	check := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("pubsub: metrics: %w", e)
		}
	}
	var e error
	ms.refused, e = m.Int64Counter("convoy.pubsub.refused.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused at once with 503 and Retry-After, by reason: capacity (MaxRequests or MaxRequestBytes reached), streams (an event stream beyond MaxStreams)."))
	check(e)
	ms.capacity = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reasonCapacity)))}
	ms.streamsFull = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reasonStreams)))}
	ms.admittedReqs, e = m.Int64UpDownCounter("convoy.pubsub.admitted.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests being served (admitted, not yet answered): at most MaxRequests."))
	check(e)
	ms.admittedBts, e = m.Int64UpDownCounter("convoy.pubsub.admitted.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes the publishes being served hold, as admission counts them: at most MaxRequestBytes."))
	check(e)
	ms.streams, e = m.Int64UpDownCounter("convoy.pubsub.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Event streams being served: at most MaxStreams."))
	check(e)
	return &ms, err
}

// refuse counts a request refused, for the reason opts name.
func (m *metrics) refuse(opts []metric.AddOption) {
	m.refused.Add(context.Background(), 1, opts...)
}

// admitted counts requests admitted (positive) or answered (negative),
// and the bytes they hold.
func (m *metrics) admitted(requests, bytes int) {
	ctx := context.Background()
	m.admittedReqs.Add(ctx, int64(requests))
	if bytes != 0 {
		m.admittedBts.Add(ctx, int64(bytes))
	}
}
