package metrictest

import (
	"context"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

func TestSums(t *testing.T) {
	m := New(t)
	meter := m.Provider.Meter("test")
	c, err := meter.Int64Counter("requests")
	if err != nil {
		t.Fatal(err)
	}
	u, err := meter.Int64UpDownCounter("streams")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c.Add(ctx, 2, metric.WithAttributes(attribute.String("api", "http"), attribute.String("reason", "capacity")))
	c.Add(ctx, 3, metric.WithAttributes(attribute.String("api", "http"), attribute.String("reason", "bytes")))
	c.Add(ctx, 5, metric.WithAttributes(attribute.String("api", "stream"), attribute.String("reason", "capacity")))
	u.Add(ctx, 4)
	u.Add(ctx, -1)

	for _, tc := range []struct {
		name  string
		attrs []string
		want  int64
	}{
		{"requests", nil, 10},
		{"requests", []string{"api", "http"}, 5},
		{"requests", []string{"reason", "capacity"}, 7},
		{"requests", []string{"api", "http", "reason", "capacity"}, 2},
		{"requests", []string{"api", "grpc"}, 0},
		{"streams", nil, 3},
		{"absent", nil, 0},
	} {
		if got := m.Sum(t, tc.name, tc.attrs...); got != tc.want {
			t.Errorf("Sum(%q, %q) = %d, want %d", tc.name, tc.attrs, got, tc.want)
		}
	}

	want := map[string]int64{
		"requests{api=http,reason=bytes}":      3,
		"requests{api=http,reason=capacity}":   2,
		"requests{api=stream,reason=capacity}": 5,
		"streams":                              3,
	}
	if got := m.Sums(t); !maps.Equal(got, want) {
		t.Errorf("Sums = %v, want %v", got, want)
	}
}
