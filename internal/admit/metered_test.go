package admit

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

func newTestMetered(t *testing.T, maxRequests, maxBytes int, streams string) (*Metered, *metrictest.Meters) {
	t.Helper()
	meters := metrictest.New(t)
	a, err := NewMetered(maxRequests, maxBytes, meters.Provider, Metrics{
		Scope: "test", Prefix: "svc", Refused: "refused", Bytes: "bytes", Streams: streams,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, meters
}

func TestMetered(t *testing.T) {
	a, meters := newTestMetered(t, 2, 100, "streams")
	capacity := NewReason("capacity")
	other := NewReason("capacity", attribute.String("api", "stream"))
	if !a.Admit(60, capacity) || !a.Admit(10, capacity) {
		t.Fatal("refused within the bounds")
	}
	if a.Admit(0, capacity) || a.Admit(0, other) {
		t.Fatal("admitted beyond MaxRequests")
	}
	a.Release(10)
	if a.Admit(50, capacity) {
		t.Fatal("admitted beyond MaxBytes")
	}
	a.Refuse(NewReason("streams"))
	a.AddStreams(2)
	a.AddStreams(-1)
	if reqs, bytes := a.Load(); reqs != 1 || bytes != 60 {
		t.Errorf("Load = %d, %d, want 1, 60", reqs, bytes)
	}
	if got := a.Total(); got != 2 {
		t.Errorf("Total = %d, want 2", got)
	}
	want := map[string]int64{
		"svc.admitted.requests":                            1,
		"svc.admitted.bytes":                               60,
		"svc.streams":                                      1,
		"svc.refused.requests{reason=capacity}":            2,
		"svc.refused.requests{api=stream,reason=capacity}": 1,
		"svc.refused.requests{reason=streams}":             1,
	}
	got := meters.Sums(t)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

func TestMeteredWithoutStreams(t *testing.T) {
	_, meters := newTestMetered(t, 1, 1, "")
	if _, ok := meters.Sums(t)["svc.streams"]; ok {
		t.Error("svc.streams made without Metrics.Streams")
	}
	if _, err := NewMetered(1, 1, nil, Metrics{Prefix: "svc"}); err != nil {
		t.Errorf("NewMetered without a MeterProvider: %v", err)
	}
}

func TestBodySize(t *testing.T) {
	for _, tc := range []struct {
		length int64 // -1: undeclared
		size   int
		ok     bool
	}{
		{-1, 100, true},
		{0, 0, true},
		{40, 40, true},
		{100, 100, true},
		{101, 0, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(""))
		r.ContentLength = tc.length
		if size, ok := BodySize(r, 100); size != tc.size || ok != tc.ok {
			t.Errorf("Content-Length %d: BodySize = %d, %v, want %d, %v", tc.length, size, ok, tc.size, tc.ok)
		}
	}
}

func TestHTTP(t *testing.T) {
	a, _ := newTestMetered(t, 1, 10, "")
	capacity := NewReason("capacity")
	refuse := func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "at capacity", http.StatusServiceUnavailable)
	}
	release, ok := a.AdmitHTTP(httptest.NewRecorder(), 10, capacity, refuse)
	if !ok {
		t.Fatal("AdmitHTTP refused within the bounds")
	}
	served := false
	h := a.Handler(func(w http.ResponseWriter, r *http.Request) { served = true }, capacity, refuse)
	w := httptest.NewRecorder()
	h(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if served || w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Errorf("at capacity: served %v, %d with Retry-After %q, want a refusal", served, w.Code, w.Header().Get("Retry-After"))
	}
	if _, ok := a.AdmitHTTP(httptest.NewRecorder(), 0, capacity, refuse); ok {
		t.Error("AdmitHTTP admitted beyond MaxRequests")
	}
	release()
	h = a.Handler(func(w http.ResponseWriter, r *http.Request) {
		served = true
		if reqs, _ := a.Load(); reqs != 1 {
			t.Errorf("served with %d requests admitted, want 1", reqs)
		}
	}, capacity, refuse)
	h(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if reqs, bytes := a.Load(); !served || reqs != 0 || bytes != 0 {
		t.Errorf("served %v, then Load = %d, %d, want true, 0, 0", served, reqs, bytes)
	}
}

// TestMeteredWait: TryAdmit counts what it admits and no refusal; Wait
// counts its refusal once its context ends without a place, and
// svc.waiting.requests the requests waiting meanwhile.
func TestMeteredWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		meters := metrictest.New(t)
		a, err := NewMetered(1, 100, meters.Provider, Metrics{Scope: "test", Prefix: "svc", Refused: "refused", Bytes: "bytes", Waiting: "waiting"})
		if err != nil {
			t.Fatal(err)
		}
		capacity := NewReason("capacity")
		if !a.TryAdmit(10) || a.TryAdmit(10) {
			t.Fatal("TryAdmit beyond MaxRequests, or not within it")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		refused := make(chan bool, 1)
		go func() { refused <- !a.Wait(ctx, 10, capacity) }()
		synctest.Wait()
		if got := meters.Sum(t, "svc.waiting.requests"); got != 1 {
			t.Errorf("svc.waiting.requests = %d while one waits, want 1", got)
		}
		if !<-refused {
			t.Fatal("Wait admitted a request without a place")
		}
		admitted := make(chan bool, 1)
		go func() { admitted <- a.Wait(context.Background(), 20, capacity) }()
		synctest.Wait()
		a.Release(10)
		if !<-admitted {
			t.Fatal("Wait did not admit the request once a place freed")
		}
		want := map[string]int64{
			"svc.admitted.requests":                 1,
			"svc.admitted.bytes":                    20,
			"svc.waiting.requests":                  0,
			"svc.refused.requests{reason=capacity}": 1,
		}
		if got := meters.Sums(t); !maps.Equal(got, want) {
			t.Errorf("metrics %v, want %v", got, want)
		}
	})
}
