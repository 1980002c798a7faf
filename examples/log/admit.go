package sharedlog

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/convoy-gcs/convoy/internal/admit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// errAtCapacity: the member serves as many requests (or bytes of
// appends) as Options.MaxRequests and Options.MaxRequestBytes allow: the
// request is refused with 503 and a Retry-After.
var errAtCapacity = errors.New("sharedlog: member at capacity")

// admission bounds the requests a member serves at once, by count and by
// the bytes the appends among them hold (admit.Limiter), so that a load
// beyond what the group can carry is refused at once instead of
// queueing: every request but GET /status takes a place for as long as
// it is served, an append before its body is read. It counts what it
// admits and refuses in the service's metrics. Its methods are safe for
// concurrent use.
type admission struct {
	*admit.Limiter
	m *metrics
}

// admit takes a place for a request that holds bytes, or counts a
// refusal and returns false if there is none. A request admitted must be
// released with the same bytes.
func (a *admission) admit(bytes int) bool {
	if !a.Admit(bytes) {
		a.m.refuse()
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

// admitBody admits a request whose body of at most limit bytes holds
// twice its size (the body, then the command made of it): its declared
// length, or limit if it declares none. It answers 413 for a declared
// length above limit, and 503 with Retry-After when the member is at
// capacity; the caller calls release once it has answered.
func (n *Node) admitBody(w http.ResponseWriter, r *http.Request, limit int) (release func(), ok bool) {
	if r.ContentLength > int64(limit) {
		n.writeError(w, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, r.ContentLength, limit))
		return nil, false
	}
	size := limit
	if r.ContentLength >= 0 {
		size = int(r.ContentLength)
	}
	bytes := appendCharge(size)
	if !n.admit.admit(bytes) {
		n.refuse(w)
		return nil, false
	}
	return func() { n.admit.release(bytes) }, true
}

// appendCharge is what admission counts for an append of size bytes.
func appendCharge(size int) int { return 2 * size }

// refuse answers a request refused for capacity: 503 with Retry-After.
func (n *Node) refuse(w http.ResponseWriter) {
	w.Header().Set("Retry-After", admit.RetryAfter(n.opts.RetryAfter))
	n.writeError(w, fmt.Errorf("%w: %w", ErrUnavailable, errAtCapacity))
}

// reasonCapacity is the reason of a refusal for MaxRequests or
// MaxRequestBytes.
const reasonCapacity = "capacity"

// metrics are the service's otel instruments, made once per Node from
// Options.MeterProvider (the README's Metrics section lists them).
type metrics struct {
	refused                   metric.Int64Counter
	capacity                  []metric.AddOption
	admittedReqs, admittedBts metric.Int64UpDownCounter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/convoy-gcs/convoy/examples/log")
	var ms metrics
	var err error
	check := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("sharedlog: metrics: %w", e)
		}
	}
	var e error
	ms.refused, e = m.Int64Counter("convoy.log.refused.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused at once with 503 and Retry-After, by reason: capacity (MaxRequests or MaxRequestBytes reached)."))
	check(e)
	ms.capacity = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reasonCapacity)))}
	ms.admittedReqs, e = m.Int64UpDownCounter("convoy.log.admitted.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests being served (admitted, not yet answered): at most MaxRequests."))
	check(e)
	ms.admittedBts, e = m.Int64UpDownCounter("convoy.log.admitted.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes the appends being served hold, as admission counts them: at most MaxRequestBytes."))
	check(e)
	return &ms, err
}

// refuse counts a request refused for capacity.
func (m *metrics) refuse() {
	m.refused.Add(context.Background(), 1, m.capacity...)
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
