package sharedlog

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// TestAdmission: with MaxRequests requests in flight, the next request
// is refused at once with 503 and a Retry-After, and counted; an append
// whose body would take the bytes beyond MaxRequestBytes is refused the
// same way, before its body is read. Once the requests in flight are
// answered, requests are served again.
func TestAdmission(t *testing.T) {
	meters := metrictest.New(t)
	n, l := newLoopbackNodeWith(t, Options{MaxValueBytes: 16, MaxRequests: 2, MaxRequestBytes: 40, RetryAfter: 1500 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), MeterProvider: meters.Provider})
	h := n.Handler()
	l.setHold()
	done := make(chan int, 2)
	for _, body := range []string{"0123456789", "x"} { // 20 bytes, then 2
		go func() {
			status, _ := call(t, h, "POST", "/log", body)
			done <- status
		}()
	}
	waitFor(t, func() bool { return l.pending() == 2 })
	if req, bytes := n.admit.Load(); req != 2 || bytes != 22 {
		t.Fatalf("admitted %d requests of %d bytes, want 2 of 22", req, bytes)
	}
	for i, target := range []string{"/log", "/log/tail", "/log/0", "/streams/s"} {
		method := "GET"
		if target == "/log" {
			method = "POST"
		}
		req := httptest.NewRequest(method, target, strings.NewReader("y"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "2" {
			t.Errorf("%s %s at capacity: %d, Retry-After %q; want 503, 2", method, target, rec.Code, rec.Header().Get("Retry-After"))
		}
		if got := meters.Sum(t, "convoy.log.refused.requests", "reason", "capacity"); got != int64(i+1) {
			t.Errorf("%d refusals counted, want %d", got, i+1)
		}
	}
	if status, _ := call(t, h, "GET", "/status", ""); status != http.StatusOK {
		t.Errorf("GET /status at capacity: %d, want 200", status)
	}
	l.release()
	for range 2 {
		if status := <-done; status != http.StatusOK {
			t.Errorf("an admitted append: %d, want 200", status)
		}
	}
	if req, bytes := n.admit.Load(); req != 0 || bytes != 0 {
		t.Fatalf("admitted %d requests of %d bytes once answered, want none", req, bytes)
	}

	// Bytes: a 16-byte append counts 32 of the 40; with it waiting, a
	// 5-byte one (10 more) is refused, and so is one that does not
	// declare its length (it counts the limit, 32).
	l.setHold()
	go func() {
		status, _ := call(t, h, "POST", "/log", strings.Repeat("z", 16))
		done <- status
	}()
	waitFor(t, func() bool { return l.pending() == 1 })
	if status, _ := call(t, h, "POST", "/log", "12345"); status != http.StatusServiceUnavailable {
		t.Errorf("an append beyond MaxRequestBytes: %d, want 503", status)
	}
	req := httptest.NewRequest("POST", "/log", strings.NewReader("1"))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("an append of undeclared length beyond MaxRequestBytes: %d, want 503", rec.Code)
	}
	if got := meters.Sum(t, "convoy.log.refused.requests", "reason", "capacity"); got != 6 {
		t.Errorf("%d refusals counted, want 6", got)
	}
	l.release()
	if status := <-done; status != http.StatusOK {
		t.Errorf("the admitted append: %d, want 200", status)
	}
	if status, _ := call(t, h, "POST", "/log", "12345"); status != http.StatusOK {
		t.Errorf("an append once the bytes are back: %d, want 200", status)
	}
}
