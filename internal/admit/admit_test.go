package admit

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(2, 100)
	for i, step := range []struct {
		op    string // admit or release
		bytes int
		ok    bool
		reqs  int
		held  int
	}{
		{"admit", 60, true, 1, 60},
		{"admit", 50, false, 1, 60}, // bytes
		{"admit", 40, true, 2, 100},
		{"admit", 0, false, 2, 100}, // requests
		{"release", 60, true, 1, 40},
		{"admit", 0, true, 2, 40},
		{"release", 0, true, 1, 40},
		{"release", 40, true, 0, 0},
	} {
		ok := true
		if step.op == "admit" {
			ok = l.Admit(step.bytes)
		} else {
			l.Release(step.bytes)
		}
		reqs, held := l.Load()
		if ok != step.ok || reqs != step.reqs || held != step.held {
			t.Fatalf("step %d, %s %d: %v with %d requests holding %d, want %v, %d, %d", i, step.op, step.bytes, ok, reqs, held, step.ok, step.reqs, step.held)
		}
	}
	if got := l.Total(); got != 3 {
		t.Errorf("Total = %d, want 3", got)
	}
}

func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "1"},
		{time.Millisecond, "1"},
		{time.Second, "1"},
		{1500 * time.Millisecond, "2"},
		{3 * time.Second, "3"},
	} {
		if got := RetryAfter(tc.d); got != tc.want {
			t.Errorf("RetryAfter(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
