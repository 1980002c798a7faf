package paxos

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleRelease: a member with IdleRelease returns its memory once
// after it served requests and then none for that long, and again only
// after it served more; never while it serves none at all.
func TestIdleRelease(t *testing.T) {
	var released atomic.Int32
	defer func(f func()) { freeOSMemory = f }(freeOSMemory)
	freeOSMemory = func() { released.Add(1) }
	const idle = 50 * time.Millisecond
	_, srv := localServer(t, Options{IdleRelease: idle}, nil)
	put := func() {
		t.Helper()
		req, err := http.NewRequest(http.MethodPut, srv.URL+"/kv/k", strings.NewReader("v"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT: %s", resp.Status)
		}
	}
	waitReleased := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for released.Load() < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(4 * idle) // and no more
		if got := released.Load(); got != want {
			t.Fatalf("released %d times, want %d", got, want)
		}
	}
	waitReleased(0)
	for range 3 {
		put()
	}
	waitReleased(1)
	put()
	waitReleased(2)
}
