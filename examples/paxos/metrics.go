package paxos

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The values of the refusals' attributes.
const (
	apiHTTP   = "http"
	apiStream = "stream"
	// reasonCapacity: MaxRequests or MaxRequestBytes reached;
	// reasonStreams: a stream upgrade beyond MaxStreams.
	reasonCapacity = "capacity"
	reasonStreams  = "streams"
)

// metrics are the service's otel instruments, made once per Node from
// Options.MeterProvider (the README's Metrics section lists them with the
// library's). Their attributes take the few values above; the options
// that carry them are made here once.
type metrics struct {
	refused                   metric.Int64Counter
	refusedBy                 map[[2]string][]metric.AddOption // by api and reason
	admittedReqs, admittedBts metric.Int64UpDownCounter
	streams                   metric.Int64UpDownCounter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/convoy-gcs/convoy/examples/paxos")
	var ms metrics
	var err error
	check := func(e error) {
		if err == nil && e != nil {
			err = fmt.Errorf("paxos: metrics: %w", e)
		}
	}
	var e error
	ms.refused, e = m.Int64Counter("convoy.kv.refused.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests refused at once with 503 and Retry-After, by api (http, stream) and reason: capacity (MaxRequests or MaxRequestBytes reached), streams (a stream upgrade beyond MaxStreams)."))
	check(e)
	ms.refusedBy = make(map[[2]string][]metric.AddOption)
	for _, api := range []string{apiHTTP, apiStream} {
		for _, reason := range []string{reasonCapacity, reasonStreams} {
			ms.refusedBy[[2]string{api, reason}] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				attribute.String("api", api), attribute.String("reason", reason)))}
		}
	}
	ms.admittedReqs, e = m.Int64UpDownCounter("convoy.kv.admitted.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests being served (admitted, not yet answered): at most MaxRequests."))
	check(e)
	ms.admittedBts, e = m.Int64UpDownCounter("convoy.kv.admitted.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes the requests being served hold, as admission counts them: at most MaxRequestBytes."))
	check(e)
	ms.streams, e = m.Int64UpDownCounter("convoy.kv.streams", metric.WithUnit("{stream}"),
		metric.WithDescription("Streams being served: at most MaxStreams."))
	check(e)
	return &ms, err
}

// refuse counts a request refused by api for reason.
func (m *metrics) refuse(api, reason string) {
	m.refused.Add(context.Background(), 1, m.refusedBy[[2]string{api, reason}]...)
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
