package retry

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// TestPacer: after a round in which members asked to wait, the pause is
// the shortest asked and up to half as long again, and the backoff
// starts afresh; after rounds in which none asked, it grows from the
// initial pause, doubling up to MaxBackoff, each up to half shorter or
// longer.
func TestPacer(t *testing.T) {
	for range 100 {
		p := NewPacer(10*time.Millisecond, MaxBackoff)
		for round, want := range []time.Duration{10, 20, 40} {
			want *= time.Millisecond
			if d := p.Next(); d < want/2 || d > want*3/2+1 {
				t.Fatalf("backoff round %d: %v, want %v ± half", round, d, want)
			}
		}
		p.Asked(3 * time.Second)
		p.Asked(0)
		p.Asked(time.Second)
		p.Asked(2 * time.Second)
		if d := p.Next(); d < time.Second || d > 1500*time.Millisecond {
			t.Fatalf("after Retry-After 1s: %v, want 1s to 1.5s", d)
		}
		if d := p.Next(); d < 5*time.Millisecond || d > 15*time.Millisecond {
			t.Fatalf("the backoff after a Retry-After: %v, want it afresh (10ms ± half)", d)
		}
		for range 20 {
			p.Next()
		}
		if d := p.Next(); d > MaxBackoff*3/2+1 {
			t.Fatalf("backoff %v beyond MaxBackoff and its jitter", d)
		}
	}
}

// TestWait: Wait pauses as Next says, and returns the context's error
// once it ends first.
func TestWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewPacer(time.Millisecond, MaxBackoff)
		p.Asked(2 * time.Second)
		start := time.Now()
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 2*time.Second || d > 3*time.Second {
			t.Fatalf("waited %v, want 2s to 3s", d)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		p.Asked(time.Minute)
		if err := p.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past the context's end: %v", err)
		}
	})
}

func TestAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, c := range []struct {
			v    string
			want time.Duration
		}{
			{"", 0},
			{"2", 2 * time.Second},
			{"0", 0},
			{"-1", 0},
			{"soon", 0},
			{time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat), 3 * time.Second},
			{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
		} {
			h := http.Header{}
			if c.v != "" {
				h.Set("Retry-After", c.v)
			}
			if got := After(h); got != c.want {
				t.Errorf("Retry-After %q: %v, want %v", c.v, got, c.want)
			}
		}
	})
}

// TestPacerBound: the backoff doubles up to the Pacer's bound, not
// beyond it but for its jitter.
func TestPacerBound(t *testing.T) {
	for range 100 {
		p := NewPacer(time.Millisecond, 5*time.Millisecond)
		for range 10 {
			p.Next()
		}
		if d := p.Next(); d < 2500*time.Microsecond || d > 7500*time.Microsecond+1 {
			t.Fatalf("backoff %v, want the bound 5ms ± half", d)
		}
	}
}
