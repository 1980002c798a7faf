package admit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metrics names a service's admission metrics and says what the ones
// that differ between services count.
type Metrics struct {
	// Scope names the meter the instruments are made from: the service's
	// package path.
	Scope string
	// Prefix names the metrics: Prefix+".refused.requests",
	// Prefix+".admitted.requests", Prefix+".admitted.bytes",
	// Prefix+".streams" and Prefix+".waiting.requests" (for example
	// "convoy.log").
	Prefix string
	// Refused describes Prefix.refused.requests: the reasons (and any
	// other attributes) a refusal is counted by.
	Refused string
	// Bytes describes Prefix.admitted.bytes: what holds the bytes.
	Bytes string
	// Streams describes Prefix.streams, the streams being served; a
	// service that serves none leaves it empty, and has no such metric.
	Streams string
	// Waiting describes Prefix.waiting.requests, the requests waiting
	// for a place (Wait); a service whose requests never wait leaves it
	// empty, and has no such metric.
	Waiting string
}

// Reason is why a request was refused: the attributes its refusal is
// counted by, "reason" and any the service adds. Make each once
// (NewReason) and keep it, so that counting a refusal costs nothing
// more.
type Reason struct{ opts []metric.AddOption }

// NewReason returns the Reason of a refusal for reason, counted with the
// attributes attrs besides.
func NewReason(reason string, attrs ...attribute.KeyValue) Reason {
	attrs = append(attrs[:len(attrs):len(attrs)], attribute.String("reason", reason))
	return Reason{opts: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attrs...))}}
}

// Metered is a Limiter that counts what it admits and refuses in a
// service's otel metrics (see Metrics):
//
//	Prefix.refused.requests   counter: the requests refused, by Reason
//	Prefix.admitted.requests  up-down counter: the requests admitted, not yet released
//	Prefix.admitted.bytes     up-down counter: the bytes they hold
//	Prefix.streams            up-down counter: the streams being served (AddStreams)
//	Prefix.waiting.requests   up-down counter, observed: the requests waiting for a place (Wait)
//
// Its methods are safe for concurrent use.
type Metered struct {
	l               *Limiter
	refused         metric.Int64Counter
	requests, bytes metric.Int64UpDownCounter
	// streams is nil without Metrics.Streams.
	streams metric.Int64UpDownCounter
}

// NewMetered returns a Metered that admits up to maxRequests requests
// holding up to maxBytes bytes together (see New), with its instruments
// made from mp (none if nil) as ms names them.
func NewMetered(maxRequests, maxBytes int, mp metric.MeterProvider, ms Metrics) (*Metered, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(ms.Scope)
	a := &Metered{l: New(maxRequests, maxBytes)}
	var err error
	if a.refused, err = m.Int64Counter(ms.Prefix+".refused.requests", metric.WithUnit("{request}"),
		metric.WithDescription(ms.Refused)); err != nil {
		return nil, err
	}
	if a.requests, err = m.Int64UpDownCounter(ms.Prefix+".admitted.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests being served (admitted, not yet answered): at most MaxRequests.")); err != nil {
		return nil, err
	}
	if a.bytes, err = m.Int64UpDownCounter(ms.Prefix+".admitted.bytes", metric.WithUnit("By"),
		metric.WithDescription(ms.Bytes)); err != nil {
		return nil, err
	}
	if ms.Waiting != "" {
		if _, err = m.Int64ObservableUpDownCounter(ms.Prefix+".waiting.requests", metric.WithUnit("{request}"),
			metric.WithDescription(ms.Waiting), metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
				o.Observe(int64(a.l.Waiting()))
				return nil
			})); err != nil {
			return nil, err
		}
	}
	if ms.Streams != "" {
		if a.streams, err = m.Int64UpDownCounter(ms.Prefix+".streams", metric.WithUnit("{stream}"),
			metric.WithDescription(ms.Streams)); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Admit takes a place for a request that holds bytes, or counts a
// refusal for refused and returns false if there is none. A request
// admitted must be released with the same bytes.
func (a *Metered) Admit(bytes int, refused Reason) bool {
	if !a.l.Admit(bytes) {
		a.Refuse(refused)
		return false
	}
	a.count(1, bytes)
	return true
}

// TryAdmit takes a place for a request that holds bytes if one is free,
// and reports whether it did; unlike Admit it counts no refusal, for a
// caller that waits for a place (Wait) when there is none.
func (a *Metered) TryAdmit(bytes int) bool {
	if !a.l.Admit(bytes) {
		return false
	}
	a.count(1, bytes)
	return true
}

// Wait takes a place for a request that holds bytes, waiting until ctx
// ends for one (see Limiter.Wait), or counts a refusal for refused and
// returns false if none freed. A request admitted must be released with
// the same bytes.
func (a *Metered) Wait(ctx context.Context, bytes int, refused Reason) bool {
	if !a.l.Wait(ctx, bytes) {
		a.Refuse(refused)
		return false
	}
	a.count(1, bytes)
	return true
}

// Release gives back the place of a request admitted with bytes.
func (a *Metered) Release(bytes int) {
	a.l.Release(bytes)
	a.count(-1, -bytes)
}

// count counts requests admitted (positive) or released (negative), and
// the bytes they hold.
func (a *Metered) count(requests, bytes int) {
	ctx := context.Background()
	a.requests.Add(ctx, int64(requests))
	if bytes != 0 {
		a.bytes.Add(ctx, int64(bytes))
	}
}

// Refuse counts a request refused for reason, by Admit or by a bound of
// the service's own (such as one on streams).
func (a *Metered) Refuse(reason Reason) {
	a.refused.Add(context.Background(), 1, reason.opts...)
}

// AddStreams counts streams that start (positive) or end (negative).
// It requires Metrics.Streams.
func (a *Metered) AddStreams(delta int) {
	a.streams.Add(context.Background(), int64(delta))
}

// Load returns the requests admitted and the bytes they hold.
func (a *Metered) Load() (requests, bytes int) { return a.l.Load() }

// Total returns how many requests were ever admitted.
func (a *Metered) Total() uint64 { return a.l.Total() }

// Waiting returns how many requests wait for a place (Wait).
func (a *Metered) Waiting() int { return a.l.Waiting() }
