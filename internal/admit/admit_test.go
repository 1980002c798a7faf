package admit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
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

// TestLimiterWait: requests that wait for a place are admitted first come
// first as places free, Admit does not take a place they are owed, one
// whose context ends leaves the queue (and those behind it may then fit),
// and one larger than the bytes bound is refused at once.
func TestLimiterWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(2, 100)
		if !l.Admit(60) || !l.Admit(30) {
			t.Fatal("the first two requests were refused")
		}
		var order []string
		var mu sync.Mutex
		wait := func(name string, ctx context.Context, bytes int) chan bool {
			done := make(chan bool, 1)
			go func() {
				ok := l.Wait(ctx, bytes)
				if ok {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
				}
				done <- ok
			}()
			synctest.Wait()
			return done
		}
		short, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		a := wait("a", context.Background(), 50) // no place: 2 requests
		b := wait("b", short, 60)                // behind a
		c := wait("c", context.Background(), 10) // behind b
		if got := l.Waiting(); got != 3 {
			t.Fatalf("Waiting = %d, want 3", got)
		}
		if l.Admit(0) {
			t.Fatal("Admit took a place while requests waited")
		}
		if l.Wait(context.Background(), 101) {
			t.Fatal("Wait admitted a request above the bytes bound")
		}
		l.Release(60) // a fits (30+50); b (60) does not: c waits behind it
		synctest.Wait()
		if !<-a {
			t.Fatal("a was not admitted")
		}
		if reqs, held := l.Load(); reqs != 2 || held != 80 {
			t.Fatalf("after a: %d requests holding %d, want 2, 80", reqs, held)
		}
		time.Sleep(time.Second) // b's context ends: c is next, but no place
		synctest.Wait()
		if <-b {
			t.Fatal("b was admitted without a place")
		}
		if got := l.Waiting(); got != 1 {
			t.Fatalf("Waiting = %d after b left, want 1", got)
		}
		l.Release(30)
		synctest.Wait()
		if !<-c {
			t.Fatal("c was not admitted")
		}
		if reqs, held := l.Load(); reqs != 2 || held != 60 || l.Waiting() != 0 {
			t.Fatalf("after c: %d requests holding %d, %d waiting; want 2, 60, 0", reqs, held, l.Waiting())
		}
		if want := []string{"a", "c"}; !slices.Equal(order, want) {
			t.Errorf("admitted %v, want %v", order, want)
		}
	})
}

// TestLimiterWaitLeavingAdmitsBehind: when the first waiting request's
// context ends, the requests behind it that fit are admitted at once.
func TestLimiterWaitLeavingAdmitsBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(3, 100)
		if !l.Admit(50) {
			t.Fatal("the first request was refused")
		}
		ctx, cancel := context.WithCancel(context.Background())
		big := make(chan bool, 1)
		go func() { big <- l.Wait(ctx, 60) }()
		synctest.Wait()
		small := make(chan bool, 1)
		go func() { small <- l.Wait(context.Background(), 20) }()
		synctest.Wait()
		if l.Waiting() != 2 {
			t.Fatalf("Waiting = %d, want 2", l.Waiting())
		}
		cancel()
		if <-big {
			t.Fatal("the big request was admitted")
		}
		if !<-small {
			t.Fatal("the small request was not admitted once the big one left")
		}
	})
}
