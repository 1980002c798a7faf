package engine

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestViewsObservability: a view change shows up as a span on every
// survivor (wedge to install, with the new epoch) and in the membership
// metrics (confirmed suspicions, views installed, the current epoch).
func TestViewsObservability(t *testing.T) {
	c := newVSCluster(t)
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	nodes := c.openAll(3, func(cfg *Config) {
		if cfg.Self == 1 {
			cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		}
	})
	stop := make(chan struct{})
	wg := c.load(stop, nodes...)
	c.waitCount(nodes[0], 100)
	c.crash(3)
	c.waitView(2, 2, nodes[:2]...)
	close(stop)
	wg.Wait()

	var change bool
	for _, s := range spans.Ended() {
		if s.Name() != "convoy.view.change" {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "convoy.next_epoch" && kv.Value.AsInt64() == 2 {
				change = true
			}
		}
	}
	if !change {
		t.Errorf("no convoy.view.change span ending in epoch 2 among %d spans", len(spans.Ended()))
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					key := m.Name
					if o, ok := dp.Attributes.Value(attribute.Key("outcome")); ok {
						key += "/" + o.AsString()
					}
					got[key] += dp.Value
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = dp.Value
				}
			}
		}
	}
	for name, min := range map[string]int64{
		"convoy.membership.views":                2,
		"convoy.membership.epoch":                2,
		"convoy.membership.suspicions/confirmed": 1,
	} {
		if got[name] < min {
			t.Errorf("%s = %d, want at least %d", name, got[name], min)
		}
	}
	if _, ok := got["convoy.membership.neighbour.lag"]; !ok {
		t.Error("no neighbour lag recorded")
	}
}
