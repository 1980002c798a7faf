package counter

import (
	"maps"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

func TestSet(t *testing.T) {
	meters := metrictest.New(t)
	s := NewSet(meters.Provider.Meter("test"))
	atomicSent := s.Counter("sent", "{message}", "Messages sent.", attribute.String("mode", "atomic"))
	totalSent := s.Counter("sent", "{message}", "Messages sent.", attribute.String("mode", "total"))
	bytes := s.Counter("bytes", "By", "Bytes sent.")
	idle := s.Counter("idle", "{thing}", "Never counted.")
	reg, err := s.Register()
	if err != nil {
		t.Fatal(err)
	}
	if got := meters.Sums(t); len(got) != 0 {
		t.Errorf("before any count: %v, want nothing reported", got)
	}
	atomicSent.Add(3)
	totalSent.Add(1)
	bytes.Add(700)
	want := map[string]int64{"sent{mode=atomic}": 3, "sent{mode=total}": 1, "bytes": 700}
	if got := meters.Sums(t); !maps.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	atomicSent.Add(2) // a reader sees every count as it stands when it collects
	want["sent{mode=atomic}"] = 5
	if got := meters.Sums(t); !maps.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	if idle.Load() != 0 {
		t.Fatal("idle counted")
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := meters.Sums(t); len(got) != 0 {
		t.Errorf("after Unregister: %v, want nothing reported", got)
	}
}

func TestSetErrors(t *testing.T) {
	meters := metrictest.New(t)
	s := NewSet(meters.Provider.Meter("test"))
	s.Counter("", "{x}", "A name the SDK refuses.")
	if _, err := s.Register(); err == nil {
		t.Error("Register with an invalid instrument name: no error")
	}

	// A Set with no counts, and one on a no-op provider, register and
	// unregister quietly.
	for _, s := range []*Set{NewSet(meters.Provider.Meter("empty")), NewSet(noop.NewMeterProvider().Meter("noop"))} {
		s.Counter("n", "1", "")
		reg, err := s.Register()
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Unregister(); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := NewSet(meters.Provider.Meter("none")).Register()
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
}
