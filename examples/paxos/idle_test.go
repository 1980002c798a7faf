package paxos

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleRelease: a member with IdleRelease returns its memory once
// after it served requests and then none for that long, and again only
// after it served more; never while it serves none at all, nor while it
// keeps serving.
func TestIdleRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 80 * time.Millisecond
		var released atomic.Int32
		n, err := NewLocal(Options{IdleRelease: idle, release: func() { released.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		h := n.Handler()
		put := func() {
			t.Helper()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/kv/k", strings.NewReader("v")))
			if rec.Code != http.StatusOK {
				t.Fatalf("PUT: %d %s", rec.Code, rec.Body)
			}
		}
		// expect checks the releases so far after d more of quiet.
		expect := func(d time.Duration, want int32) {
			t.Helper()
			time.Sleep(d)
			synctest.Wait()
			if got := released.Load(); got != want {
				t.Fatalf("released %d times, want %d", got, want)
			}
		}
		expect(10*idle, 0) // nothing served yet
		put()
		put()
		expect(idle/2, 0) // quiet, but not for long enough
		// Requests keep coming, each within idle of the last: no release.
		for range 8 {
			put()
			expect(idle/2, 0)
		}
		expect(idle, 1)    // quiet for idle (give or take a tick)
		expect(10*idle, 1) // once only
		put()
		expect(2*idle, 2)
		expect(10*idle, 2)
	})
}
