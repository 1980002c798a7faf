package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// metricValues collects what reader holds: each counter's sum, each
// gauge's value and each histogram's count, by series, named
// "name{key=value,…}" with the attributes in order (the bare name without
// any).
func metricValues(t *testing.T, reader *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]float64)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					out[series(m.Name, dp.Attributes)] += float64(dp.Value)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					out[series(m.Name, dp.Attributes)] = float64(dp.Value)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					out[series(m.Name, dp.Attributes)] = dp.Value
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					out[series(m.Name, dp.Attributes)] += float64(dp.Count)
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					out[series(m.Name, dp.Attributes)] += float64(dp.Count)
				}
			default:
				t.Fatalf("metric %s: teach metricValues %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// series names a metric's series.
func series(name string, attrs attribute.Set) string {
	if attrs.Len() == 0 {
		return name
	}
	var kv []string
	for _, a := range attrs.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	return name + "{" + strings.Join(kv, ",") + "}"
}

// waitMetric waits until the series of reader's metrics name holds at
// least min.
func waitMetric(t *testing.T, reader *sdkmetric.ManualReader, name string, min float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := metricValues(t, reader)[name]
		if got >= min {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, want at least %v", name, got, min)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkMetrics checks that each series in want was recorded and holds at
// least its value, and that the metrics named in exact have no series
// but want's: their attributes are those and no others.
func checkMetrics(t *testing.T, got, want map[string]float64, exact ...string) {
	t.Helper()
	for name, min := range want {
		if v, ok := got[name]; !ok || v < min {
			t.Errorf("%s = %v (recorded: %v), want at least %v", name, v, ok, min)
		}
	}
	for s := range got {
		for _, name := range exact {
			if strings.HasPrefix(s, name+"{") || s == name {
				if _, ok := want[s]; !ok {
					t.Errorf("unexpected series %s", s)
				}
			}
		}
	}
}

// The measurements made per message, record or chunk allocate nothing:
// their attributes come in options made once.
func TestMetricsDoNotAllocate(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := newMetrics(mp, Atomic)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	transferred := m.transferred(roleJoiner, kindSnapshot)
	for name, f := range map[string]func(){
		"sent":        func() { m.sent(5) },
		"delivered":   func() { m.delivered(5) },
		"latency":     func() { m.latency.Record(ctx, 0.001, m.mode.rec...) },
		"barrier lag": func() { m.barrierLag.Record(ctx, 0.001, m.commit.rec...) },
		"control":     func() { m.control.Add(ctx, 2, m.beacon.add...) },
		"fenced":      func() { m.fenced.Add(ctx, 1, m.late.add...) },
		"transfer":    func() { transferred(1 << 10) },
	} {
		f() // the first measurement of a series makes it
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per measurement", name, n)
		}
	}
}
