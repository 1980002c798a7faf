// Package counter keeps the counts that hot paths update, one per message
// or record, in atomics, and reports them through asynchronous
// OpenTelemetry counters: an update costs an atomic add rather than a
// synchronous measurement (a lookup of its attribute set and an
// aggregation in the SDK: 130–180 ns against 3 ns on a recent x86 core),
// and a reader that collects gets every count as it stands then, so a
// count updated before an event is read in full by whoever saw the event.
package counter

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Set makes the counts of one meter and registers the callback that
// reports them.
type Set struct {
	meter metric.Meter
	insts map[string]metric.Int64ObservableCounter
	obs   []observed
	err   error
}

type observed struct {
	inst  metric.Int64ObservableCounter
	n     *Counter
	attrs metric.ObserveOption
}

// Counter is a count that only grows: it offers Add and Load, and no way
// to set it. It wraps an atomic.Int64 and nothing more, so an Add costs
// an atomic add. Safe for concurrent use.
type Counter struct{ n atomic.Int64 }

// Add adds delta, which must not be negative, to the count.
func (c *Counter) Add(delta int64) { c.n.Add(delta) }

// Load returns the count.
func (c *Counter) Load() int64 { return c.n.Load() }

// NewSet returns a Set that makes its counters on m.
func NewSet(m metric.Meter) *Set {
	return &Set{meter: m, insts: make(map[string]metric.Int64ObservableCounter)}
}

// Counter returns a count reported as the counter name with the
// attributes attrs; a count is reported once it is not zero, as a
// synchronous counter's series appears at its first measurement. Counts
// of one name share an instrument, made with the unit and description of
// the first.
func (s *Set) Counter(name, unit, desc string, attrs ...attribute.KeyValue) *Counter {
	inst, ok := s.insts[name]
	if !ok {
		var err error
		inst, err = s.meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil && s.err == nil {
			s.err = fmt.Errorf("counter %s: %w", name, err)
		}
		s.insts[name] = inst
	}
	n := new(Counter)
	s.obs = append(s.obs, observed{inst: inst, n: n, attrs: metric.WithAttributeSet(attribute.NewSet(attrs...))})
	return n
}

// Register registers the callback that reports the Set's counts, and
// returns the first error met making its counters. Counts made after
// Register are not reported. Unregister the registration when the counts'
// owner is gone, or the provider keeps reporting them.
func (s *Set) Register() (metric.Registration, error) {
	if s.err != nil {
		return nil, s.err
	}
	if len(s.obs) == 0 {
		return noRegistration{}, nil
	}
	insts := make([]metric.Observable, 0, len(s.insts))
	for _, inst := range s.insts {
		insts = append(insts, inst)
	}
	obs := s.obs
	reg, err := s.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, ob := range obs {
			if n := ob.n.Load(); n != 0 {
				o.ObserveInt64(ob.inst, n, ob.attrs)
			}
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, fmt.Errorf("counter: register: %w", err)
	}
	return reg, nil
}

type noRegistration struct{ metric.Registration }

func (noRegistration) Unregister() error { return nil }
