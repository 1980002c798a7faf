// Package metrictest gives tests a meter provider and reads back what
// it collected.
package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Meters is a meter provider that a test reads with Sum and Sums.
type Meters struct {
	// Provider is what the code under test takes as its MeterProvider.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// New returns Meters shut down at the end of the test.
func New(t testing.TB) *Meters {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Meters{Provider: mp, reader: r}
}

// Sum returns the value of the int64 sum (a counter or an up-down
// counter) name, over its points whose attributes include attrs (pairs
// of key and value); 0 if it has none. It fails the test if name is
// another kind of instrument.
func (m *Meters) Sum(t testing.TB, name string, attrs ...string) int64 {
	t.Helper()
	var total int64
	for _, mt := range m.collect(t) {
		if mt.Name != name {
			continue
		}
		sum, ok := mt.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s: %T, want an int64 sum", name, mt.Data)
		}
	points:
		for _, p := range sum.DataPoints {
			for i := 0; i+1 < len(attrs); i += 2 {
				if v, ok := p.Attributes.Value(attribute.Key(attrs[i])); !ok || v.AsString() != attrs[i+1] {
					continue points
				}
			}
			total += p.Value
		}
	}
	return total
}

// Sums returns every int64 sum collected, by metric name and attribute
// set ("name" alone without attributes, else "name{k=v,...}"). It fails
// the test if an instrument is of another kind.
func (m *Meters) Sums(t testing.TB) map[string]int64 {
	t.Helper()
	got := make(map[string]int64)
	for _, mt := range m.collect(t) {
		sum, ok := mt.Data.(metricdata.Sum[int64])
		if !ok {
			t.Fatalf("%s: %T, want an int64 sum", mt.Name, mt.Data)
		}
		for _, p := range sum.DataPoints {
			key := mt.Name
			if p.Attributes.Len() > 0 {
				key += "{" + p.Attributes.Encoded(attribute.DefaultEncoder()) + "}"
			}
			got[key] += p.Value
		}
	}
	return got
}

// collect reads every metric collected.
func (m *Meters) collect(t testing.TB) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []metricdata.Metrics
	for _, sm := range rm.ScopeMetrics {
		out = append(out, sm.Metrics...)
	}
	return out
}
