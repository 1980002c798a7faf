package paxos

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// TestAdmissionDefaults: the bounds' defaults follow the group's window,
// and a MaxRequestBytes that the largest request would not fit in is
// refused.
func TestAdmissionDefaults(t *testing.T) {
	o, err := Options{}.withDefaults(convoy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxRequests != DefaultMaxRequests || o.MaxRequestBytes != convoy.DefaultWindowBytes || o.MaxStreams != DefaultMaxStreams || o.RetryAfter != DefaultRetryAfter {
		t.Errorf("defaults %+v", o)
	}
	o, err = Options{}.withDefaults(convoy.Config{WindowMessages: 100, WindowBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxRequests != 100 || o.MaxRequestBytes != o.largestCharge() || o.largestCharge() <= 1<<20 {
		t.Errorf("with a window of 100 messages and 1 MiB: MaxRequests %d, MaxRequestBytes %d (largest request %d)", o.MaxRequests, o.MaxRequestBytes, o.largestCharge())
	}
	small := Options{MaxValueBytes: 64}
	if _, err := (Options{MaxValueBytes: 64, MaxRequestBytes: small.largestCharge() - 1}).withDefaults(convoy.Config{}); err == nil || !strings.Contains(err.Error(), "MaxRequestBytes") {
		t.Errorf("MaxRequestBytes below the largest request: %v", err)
	}
	for _, bad := range []Options{{MaxRequests: -1}, {MaxRequestBytes: -1}, {MaxStreams: -1}, {RetryAfter: -time.Second}} {
		if _, err := bad.withDefaults(convoy.Config{}); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// heldRequest sends r to n in the background once f holds commands, and
// returns its answer's channel once r holds its place (its command, or
// its read's barrier, is held).
func heldRequest(t *testing.T, n *Node, f *fakeGroup, r req) <-chan *httptest.ResponseRecorder {
	t.Helper()
	f.set(func(f *fakeGroup) { f.hold = true })
	out := make(chan *httptest.ResponseRecorder, 1)
	go func() { out <- r.do(t, n.Handler()) }()
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.held) > 0 || len(f.heldSyncs) > 0
	})
	return out
}

// TestAdmissionHTTP: beyond MaxRequests, every KV request is refused at
// once with 503 and Retry-After, and counted; the status is not; a place
// is free again once its request is answered.
func TestAdmissionHTTP(t *testing.T) {
	m := metrictest.New(t)
	n, f := newTestNode(t, Options{MaxRequests: 1, RetryAfter: 1500 * time.Millisecond, MeterProvider: m.Provider})
	put := req{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IdempotencyHeader: "p1"}}
	done := heldRequest(t, n, f, put)
	if got := m.Sum(t, "convoy.kv.admitted.requests"); got != 1 {
		t.Errorf("admitted requests %d, want 1", got)
	}
	for _, r := range []req{
		{method: "PUT", path: "/kv/b", body: "y"},
		{method: "GET", path: "/kv/a"},
		{method: "GET", path: "/kv/a?stale=true"},
		{method: "DELETE", path: "/kv/a"},
		{method: "POST", path: "/kv/a/cas", body: `{"old":null,"new":"z"}`},
	} {
		r.code, r.want = 503, "~at capacity"
		w := r.do(t, n.Handler())
		r.check(t, w)
		if got := w.Header().Get("Retry-After"); got != "2" {
			t.Errorf("%s %s: Retry-After %q, want 2 (1.5s, rounded up)", r.method, r.path, got)
		}
	}
	if got := m.Sum(t, "convoy.kv.refused.requests", "api", "http", "reason", "capacity"); got != 5 {
		t.Errorf("refused requests %d, want 5", got)
	}
	(req{method: "GET", path: "/status", code: 200, want: "~\"serving\":true"}).check(t, (req{method: "GET", path: "/status"}).do(t, n.Handler()))
	// A body too large is refused for that first.
	(req{method: "PUT", path: "/kv/b", body: strings.Repeat("v", DefaultMaxValueBytes+1), code: 413, want: "~limit"}).check(t,
		(req{method: "PUT", path: "/kv/b", body: strings.Repeat("v", DefaultMaxValueBytes+1)}).do(t, n.Handler()))

	f.release()
	r := put
	r.code, r.want, r.index = 200, `{"index":1}`+"\n", "1"
	r.check(t, <-done)
	f.set(func(f *fakeGroup) { f.hold = false })
	r = req{method: "PUT", path: "/kv/b", body: "y", code: 200, want: `{"index":2}` + "\n", index: "2"}
	r.check(t, r.do(t, n.Handler()))
	if got := m.Sum(t, "convoy.kv.admitted.requests"); got != 0 {
		t.Errorf("admitted requests %d after the answers, want 0", got)
	}
}

// TestAdmissionBytes: requests are admitted by the bytes they hold too:
// a cas whose body's length is not declared counts its limit, four
// times, and leaves no room for another request holding bytes.
func TestAdmissionBytes(t *testing.T) {
	o := Options{MaxValueBytes: 64}
	o.MaxRequestBytes = o.largestCharge()
	n, f := newTestNode(t, o)
	f.set(func(f *fakeGroup) { f.hold = true })
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		hr := httptest.NewRequest("POST", "/kv/a/cas", strings.NewReader(`{"old":null,"new":"z"}`))
		hr.ContentLength = -1 // sent in chunks: its length is not known
		w := httptest.NewRecorder()
		n.Handler().ServeHTTP(w, hr)
		done <- w
	}()
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.held) > 0
	})
	if reqs, bytes := n.admit.Load(); reqs != 1 || bytes != 4*n.opts.casBodyLimit() {
		t.Errorf("admitted %d requests, %d bytes; want 1, %d", reqs, bytes, 4*n.opts.casBodyLimit())
	}
	r := req{method: "PUT", path: "/kv/b", body: "y", code: 503, want: "~at capacity"}
	r.check(t, r.do(t, n.Handler()))
	// A read holds no bytes of its own: it is admitted.
	f.set(func(f *fakeGroup) { f.hold = false })
	r = req{method: "GET", path: "/kv/b", code: 404, want: "~not found", index: "0"}
	r.check(t, r.do(t, n.Handler()))
	f.release()
	if w := <-done; w.Code != 200 {
		t.Fatalf("cas: %d %s", w.Code, w.Body)
	}
	if reqs, bytes := n.admit.Load(); reqs != 0 || bytes != 0 {
		t.Errorf("admitted %d requests, %d bytes after the answers; want none", reqs, bytes)
	}
}

// TestAdmissionStream: a stream's request beyond the member's capacity
// waits for a place, and is served once one frees; one for which none
// frees within RetryAfter gets 503 with the RetryAfter, its frame unread,
// and the stream goes on; an upgrade beyond MaxStreams gets 503 with
// Retry-After.
func TestAdmissionStream(t *testing.T) {
	m := metrictest.New(t)
	n, f := newTestNode(t, Options{MaxRequests: 1, MaxStreams: 1, RetryAfter: 1500 * time.Millisecond, MeterProvider: m.Provider})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	conn, br := rawStream(t, srv)
	f.set(func(f *fakeGroup) { f.hold = true })
	write := func(r wire.Request) {
		t.Helper()
		if _, err := conn.Write(wire.AppendRequest(nil, &r)); err != nil {
			t.Fatal(err)
		}
	}
	write(wire.Request{Tag: 1, Op: wire.OpPut, Key: "a", ID: "p1", Value: []byte("x")})
	waitFor(t, func() bool {
		reqs, _ := n.admit.Load()
		return reqs == 1
	})
	// Tag 2 waits for tag 1's place, and takes it once tag 1 is answered.
	write(wire.Request{Tag: 2, Op: wire.OpPut, Key: "b", ID: "p2", Value: []byte("y")})
	waitFor(t, func() bool { return n.admit.Waiting() == 1 })
	if got := m.Sum(t, "convoy.kv.waiting.requests"); got != 1 {
		t.Errorf("waiting requests %d, want 1", got)
	}
	f.release()
	if r := readResponse(t, br); r.Tag != 1 || r.Status != http.StatusOK {
		t.Errorf("answer %+v, want tag 1 applied", r)
	}
	waitFor(t, func() bool {
		reqs, _ := n.admit.Load()
		return reqs == 1 && n.admit.Waiting() == 0
	})
	// Tag 3 finds no place within RetryAfter: tag 2 is held.
	start := time.Now()
	write(wire.Request{Tag: 3, Op: wire.OpGet, Key: "a"})
	if r := readResponse(t, br); r.Tag != 3 || r.Status != http.StatusServiceUnavailable || r.RetryAfter != 1500*time.Millisecond || !strings.Contains(string(r.Body), "at capacity") {
		t.Errorf("answer %+v (%s), want tag 3 refused with 503 and RetryAfter 1.5s", r, r.Body)
	}
	if waited := time.Since(start); waited < 1500*time.Millisecond {
		t.Errorf("tag 3 refused after %v, want it to wait RetryAfter (1.5s) first", waited)
	}
	if got := m.Sum(t, "convoy.kv.refused.requests", "api", "stream", "reason", "capacity"); got != 1 {
		t.Errorf("refused stream requests %d, want 1", got)
	}

	resp, err := srv.Client().Do(func() *http.Request {
		r, _ := http.NewRequest("GET", srv.URL+wire.StreamPath, nil)
		r.Header.Set("Connection", "Upgrade")
		r.Header.Set("Upgrade", wire.Protocol)
		return r
	}())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "2" {
		t.Errorf("a second stream: %s, Retry-After %q; want 503 and 2", resp.Status, resp.Header.Get("Retry-After"))
	}
	if got := m.Sum(t, "convoy.kv.refused.requests", "api", "stream", "reason", "streams"); got != 1 {
		t.Errorf("refused streams %d, want 1", got)
	}
	if got := m.Sum(t, "convoy.kv.streams"); got != 1 {
		t.Errorf("streams %d, want 1", got)
	}

	f.release()
	if r := readResponse(t, br); r.Tag != 2 || r.Status != http.StatusOK {
		t.Errorf("answer %+v, want tag 2 applied", r)
	}
}

// TestAdmissionStreamBatch: of writes that arrive together, those with
// places go to the group as one batch, and the rest wait for places
// rather than being refused.
func TestAdmissionStreamBatch(t *testing.T) {
	m := metrictest.New(t)
	n, f := newTestNode(t, Options{MaxRequests: 2, MeterProvider: m.Provider})
	srv := httptest.NewServer(n.Handler())
	t.Cleanup(srv.Close)
	conn, br := rawStream(t, srv)
	f.set(func(f *fakeGroup) { f.hold = true })
	var frames []byte
	for tag := uint64(1); tag <= 3; tag++ {
		frames = wire.AppendRequest(frames, &wire.Request{Tag: tag, Op: wire.OpPut, Key: fmt.Sprint("k", tag), ID: fmt.Sprint("p", tag), Value: []byte("v")})
	}
	if _, err := conn.Write(frames); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		reqs, _ := n.admit.Load()
		return reqs == 2 && n.admit.Waiting() == 1
	})
	f.mu.Lock()
	held := len(f.held)
	f.mu.Unlock()
	if held != 1 {
		t.Fatalf("%d messages sent to the group, want 1 (a batch of tags 1 and 2)", held)
	}
	f.release()
	waitFor(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.held) == 1
	})
	f.set(func(f *fakeGroup) { f.hold = false })
	f.release()
	got := map[uint64]int{}
	for range 3 {
		r := readResponse(t, br)
		got[r.Tag] = int(r.Status)
	}
	if want := map[uint64]int{1: http.StatusOK, 2: http.StatusOK, 3: http.StatusOK}; !maps.Equal(got, want) {
		t.Errorf("answers %v, want %v", got, want)
	}
	if got := m.Sum(t, "convoy.kv.refused.requests"); got != 0 {
		t.Errorf("%d requests refused, want none", got)
	}
}

// TestClientRetriesRefusals: a client refused for capacity, over HTTP or
// a stream, waits the member's Retry-After and tries again, until the
// member has room, or its context ends.
func TestClientRetriesRefusals(t *testing.T) {
	for _, streams := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "stream"}[streams], func(t *testing.T) {
			m := metrictest.New(t)
			n, f := newTestNode(t, Options{MaxRequests: 1, RetryAfter: 50 * time.Millisecond, MeterProvider: m.Provider})
			srv := httptest.NewServer(n.Handler())
			t.Cleanup(srv.Close)
			done := heldRequest(t, n, f, req{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IdempotencyHeader: "p1"}})
			opts := []client.Option{client.WithHTTPClient(&http.Client{Transport: &http.Transport{}})}
			if streams {
				opts = append(opts, client.WithStreams())
			}
			c := client.New([]string{srv.URL}, opts...)
			t.Cleanup(func() { c.Close() })

			// While the place is taken, until the context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := c.Put(ctx, "b", []byte("y"))
			if !strings.Contains(err.Error(), "at capacity") || !strings.Contains(err.Error(), "deadline exceeded") {
				t.Fatalf("Put while the member is at capacity: %v, want the context's end and the last answer", err)
			}
			// Over HTTP, Retry-After is in seconds: one retry at most.
			if got := m.Sum(t, "convoy.kv.refused.requests"); got < 1 || (streams && got < 2) {
				t.Errorf("%d refusals in 500 ms, want at least %d", got, map[bool]int{false: 1, true: 2}[streams])
			}

			// Room comes while the call waits.
			go func() {
				time.Sleep(100 * time.Millisecond)
				f.release()
				f.set(func(f *fakeGroup) { f.hold = false })
			}()
			if _, err := c.Put(testContext(t), "b", []byte("y")); err != nil {
				t.Fatalf("Put once the member has room: %v", err)
			}
			if w := <-done; w.Code != 200 {
				t.Fatalf("the held put: %d %s", w.Code, w.Body)
			}
		})
	}
}
