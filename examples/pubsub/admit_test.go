package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// waitFor polls cond until it holds, or fails the test after a long
// while (a loaded machine may be slow, never this slow).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Logf("%s", buf[:runtime.Stack(buf, true)])
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// held is a publish whose body is on its way: the member admitted it
// and waits for the rest of its body.
type held struct {
	w    *io.PipeWriter
	rest string
	done chan int // the answer's status
}

// holdPublish starts a publish on topic of a body of size bytes, of
// which it sends all but the last; with size < 0, it declares no length
// (and sends one byte).
func holdPublish(t *testing.T, hc *http.Client, base, topic string, size int) *held {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, base+"/topics/"+topic, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(max(size, 0))
	h := &held{w: pw, rest: "z", done: make(chan int, 1)}
	go func() {
		resp, err := hc.Do(req)
		pr.Close() // a writer the member did not wait for returns
		if err != nil {
			h.done <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.done <- resp.StatusCode
	}()
	if size > 1 {
		go pw.Write([]byte(strings.Repeat("y", size-1)))
	}
	if size < 0 {
		h.rest = ""
		go pw.Write([]byte("y"))
	}
	return h
}

// finish sends the rest of the body and returns the answer's status.
func (h *held) finish() int {
	if h.rest != "" {
		h.w.Write([]byte(h.rest))
	}
	h.w.Close()
	return <-h.done
}

// call sends one request and returns its status, its Retry-After and
// its JSON error.
func call(t *testing.T, hc *http.Client, method, u, body string) (status int, retryAfter, errMsg string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct {
		Error string `json:"error"`
	}
	if resp.StatusCode != http.StatusOK {
		json.NewDecoder(resp.Body).Decode(&e)
	}
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Error
}

// openStream opens an event stream of topic and returns its status and
// a function that disconnects it.
func openStream(t *testing.T, hc *http.Client, base, topic string) (status int, retryAfter string, disconnect func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/topics/"+topic+"/events?from=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), func() {
		cancel()
		resp.Body.Close()
	}
}

// TestAdmission runs one member with small bounds. With MaxRequests
// publishes waiting for their bodies, every other request but GET
// /status is refused at once with 503, a Retry-After and a JSON error,
// and counted; a publish declaring more than MaxMessageBytes still gets
// 413. A publish whose body would take the bytes beyond MaxRequestBytes
// is refused the same way, and so is one that declares no length (it
// counts MaxMessageBytes). Event streams have their own bound,
// MaxStreams, apart from the requests. Places are given back once a
// request is answered and once a stream's client goes away.
func TestAdmission(t *testing.T) {
	meters := metrictest.New(t)
	c := newCluster(t, Options{MaxMessageBytes: 100, MaxRequests: 2, MaxRequestBytes: 150, MaxStreams: 2,
		RetryAfter: 1500 * time.Millisecond, MeterProvider: meters.Provider})
	m := c.openAll(1)[0]
	n, base := m.node, m.srv.URL
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	if status, _, e := call(t, hc, "POST", base+"/topics/t/subscribe", ""); status != http.StatusOK {
		t.Fatalf("subscribe: %d %s", status, e)
	}
	load := func() (requests, bytes, streams int) {
		requests, bytes = n.admit.requests.Load()
		streams, _ = n.admit.streams.Load()
		return requests, bytes, streams
	}

	// Requests: two publishes of 60 and 10 bytes wait for their last
	// byte.
	a, b := holdPublish(t, hc, base, "t", 60), holdPublish(t, hc, base, "t", 10)
	waitFor(t, "two publishes are admitted", func() bool { r, _, _ := load(); return r == 2 })
	if r, by, _ := load(); r != 2 || by != 70 {
		t.Fatalf("admitted %d requests of %d bytes, want 2 of 70", r, by)
	}
	if got := meters.Sum(t, "convoy.pubsub.admitted.requests"); got != 2 {
		t.Errorf("convoy.pubsub.admitted.requests %d, want 2", got)
	}
	for i, req := range []struct{ method, path, body string }{
		{"POST", "/topics/t", "x"},
		{"POST", "/topics/t/subscribe", ""},
		{"POST", "/topics/u/subscribe?mode=total", ""},
		{"POST", "/topics/t/unsubscribe", ""},
		{"GET", "/topics", ""},
	} {
		status, after, e := call(t, hc, req.method, base+req.path, req.body)
		if status != http.StatusServiceUnavailable || after != "2" || !strings.Contains(e, "at capacity") {
			t.Errorf("%s %s at capacity: %d, Retry-After %q, error %q; want 503, 2, at capacity", req.method, req.path, status, after, e)
		}
		if got := meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonCapacity); got != int64(i+1) {
			t.Errorf("%d refusals for capacity counted, want %d", got, i+1)
		}
	}
	if status, _, e := call(t, hc, "GET", base+"/status", ""); status != http.StatusOK {
		t.Errorf("GET /status at capacity: %d %s, want 200", status, e)
	}
	if status, _, _ := call(t, hc, "POST", base+"/topics/t", strings.Repeat("x", 101)); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a publish above MaxMessageBytes at capacity: %d, want 413", status)
	}

	// Streams: two are served though the requests are at their bound;
	// a third is refused.
	var disconnect [2]func()
	for i := range disconnect {
		var status int
		if status, _, disconnect[i] = openStream(t, hc, base, "t"); status != http.StatusOK {
			t.Fatalf("stream %d: %d, want 200", i, status)
		}
	}
	if _, _, s := load(); s != 2 {
		t.Fatalf("%d streams admitted, want 2", s)
	}
	status, after, refused := openStream(t, hc, base, "t")
	refused()
	if status != http.StatusServiceUnavailable || after != "2" {
		t.Errorf("a stream beyond MaxStreams: %d, Retry-After %q; want 503, 2", status, after)
	}
	if streams, capacity := meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonStreams), meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonCapacity); streams != 1 || capacity != 5 {
		t.Errorf("refusals counted %d for streams and %d for capacity, want 1 and 5", streams, capacity)
	}
	if got := meters.Sum(t, "convoy.pubsub.streams"); got != 2 {
		t.Errorf("convoy.pubsub.streams %d, want 2", got)
	}

	// The publishes end: their places are back.
	for _, h := range []*held{a, b} {
		if status := h.finish(); status != http.StatusOK {
			t.Errorf("an admitted publish: %d, want 200", status)
		}
	}
	if r, by, _ := load(); r != 0 || by != 0 {
		t.Fatalf("admitted %d requests of %d bytes once answered, want none", r, by)
	}

	// Bytes: a publish of 100 holds 100 of the 150; with it waiting, one
	// of 60 is refused, and so is one that declares no length (it counts
	// 100); one of 50 fits.
	big := holdPublish(t, hc, base, "t", 100)
	waitFor(t, "the publish is admitted", func() bool { r, _, _ := load(); return r == 1 })
	if status, after, _ := call(t, hc, "POST", base+"/topics/t", strings.Repeat("x", 60)); status != http.StatusServiceUnavailable || after != "2" {
		t.Errorf("a publish beyond MaxRequestBytes: %d, Retry-After %q; want 503, 2", status, after)
	}
	undeclared := holdPublish(t, hc, base, "t", -1)
	if status := undeclared.finish(); status != http.StatusServiceUnavailable {
		t.Errorf("a publish of undeclared length beyond MaxRequestBytes: %d, want 503", status)
	}
	if status, _, e := call(t, hc, "POST", base+"/topics/t", strings.Repeat("x", 50)); status != http.StatusOK {
		t.Errorf("a publish within MaxRequestBytes: %d %s, want 200", status, e)
	}
	if got := meters.Sum(t, "convoy.pubsub.refused.requests", "reason", reasonCapacity); got != 7 {
		t.Errorf("%d refusals for capacity counted, want 7", got)
	}
	if status := big.finish(); status != http.StatusOK {
		t.Errorf("the admitted publish: %d, want 200", status)
	}

	// A stream's client goes away: its place is back, for another.
	disconnect[0]()
	waitFor(t, "the stream's place is back", func() bool { _, _, s := load(); return s == 1 })
	status, _, disconnect[0] = openStream(t, hc, base, "t")
	if status != http.StatusOK {
		t.Errorf("a stream once a place is back: %d, want 200", status)
	}
	for _, d := range disconnect {
		d()
	}
	waitFor(t, "every place is back", func() bool { r, by, s := load(); return r == 0 && by == 0 && s == 0 })
	for _, name := range []string{"convoy.pubsub.admitted.requests", "convoy.pubsub.admitted.bytes", "convoy.pubsub.streams"} {
		if got := meters.Sum(t, name); got != 0 {
			t.Errorf("%s %d once every place is back, want 0", name, got)
		}
	}
}

// TestOptions: negative bounds, and a MaxRequestBytes below
// MaxMessageBytes, are refused with ErrInvalidOptions; zeros take the
// defaults, bounded by the group's window.
func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{MaxRequests: -1}, {MaxRequestBytes: -1}, {MaxStreams: -1}, {RetryAfter: -time.Second},
		{MaxMessageBytes: -1}, {Retain: -1}, {MaxMessageBytes: 100, MaxRequestBytes: 99},
	} {
		if _, err := o.withDefaults(convoy.Config{WindowMessages: 0, WindowBytes: 0}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
	o, err := Options{}.withDefaults(convoy.Config{WindowMessages: 0, WindowBytes: 0})
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxRequests != DefaultMaxRequests || o.MaxStreams != DefaultMaxStreams || o.RetryAfter != DefaultRetryAfter || o.MaxRequestBytes < o.MaxMessageBytes {
		t.Errorf("defaults %+v", o)
	}
	o, err = Options{}.withDefaults(convoy.Config{WindowMessages: 16, WindowBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if o.MaxRequests != 16 || o.MaxRequestBytes != DefaultMaxMessageBytes {
		t.Errorf("defaults under a small window: MaxRequests %d, MaxRequestBytes %d; want 16, %d", o.MaxRequests, o.MaxRequestBytes, DefaultMaxMessageBytes)
	}
}
