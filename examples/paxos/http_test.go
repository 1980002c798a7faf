package paxos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/examples/paxos/wire"
)

// fakeGroup stands in for a convoy.Group: Send delivers at once, in
// order, to the node (as a one-member group would), unless told to fail
// or to hold what it is sent.
type fakeGroup struct {
	n *Node

	mu    sync.Mutex
	index uint64
	// err makes Send fail; hold makes it accept without delivering, and
	// keep the payloads in held.
	err     error
	hold    bool
	held    [][]byte
	serving bool
	closed  bool
	// syncs counts the Syncs made; heldSyncs are those waiting for
	// release, while hold is set.
	syncs     int
	heldSyncs []chan uint64
	syncErr   error // for the held Syncs failSyncs ended
	// last is the payload delivered last.
	last []byte
}

// Sync returns the index delivered so far, or, while hold is set, once
// release delivers what was held.
func (f *fakeGroup) Sync(ctx context.Context) (uint64, error) {
	f.mu.Lock()
	f.syncs++
	switch {
	case f.closed:
		f.mu.Unlock()
		return 0, convoy.ErrClosed
	case f.err != nil:
		f.mu.Unlock()
		return 0, f.err
	case !f.hold:
		defer f.mu.Unlock()
		return f.index, nil
	}
	ch := make(chan uint64, 1)
	f.heldSyncs = append(f.heldSyncs, ch)
	f.mu.Unlock()
	select {
	case i, ok := <-ch:
		if !ok {
			f.mu.Lock()
			defer f.mu.Unlock()
			return 0, f.syncErr
		}
		return i, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (f *fakeGroup) Send(ctx context.Context, p []byte, _ ...convoy.SendOption) (convoy.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return convoy.Receipt{}, convoy.ErrClosed
	case f.err != nil:
		if f.hold {
			f.held = append(f.held, p)
		}
		return convoy.Receipt{}, f.err
	case f.hold:
		f.held = append(f.held, p)
		return convoy.Receipt{}, nil
	}
	f.deliverLocked(p)
	return convoy.Receipt{Seq: f.index}, nil
}

func (f *fakeGroup) deliverLocked(p []byte) {
	f.index++
	f.last = p
	f.n.deliver(convoy.Delivery{Epoch: 1, Index: f.index, Sender: 1, Payload: p})
}

// failSyncs ends the Syncs held with err, as a group that excluded this
// member does.
func (f *fakeGroup) failSyncs(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.heldSyncs {
		close(ch)
	}
	f.heldSyncs, f.syncErr = nil, err
}

// release delivers what was held.
func (f *fakeGroup) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.held {
		f.deliverLocked(p)
	}
	f.held = nil
	for _, ch := range f.heldSyncs {
		ch <- f.index
	}
	f.heldSyncs = nil
}

func (f *fakeGroup) set(fn func(f *fakeGroup)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeGroup) View() (convoy.View, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return convoy.View{Epoch: 3, Members: []convoy.Member{{ID: 1}, {ID: 2}}}, f.serving
}

func (f *fakeGroup) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// newTestNode returns member 1's node on a fake group.
func newTestNode(t *testing.T, opts Options) (*Node, *fakeGroup) {
	t.Helper()
	opts, err := opts.withDefaults(convoy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNode(1, opts)
	if err != nil {
		t.Fatal(err)
	}
	n.maybeSentWait = 10 * time.Millisecond
	f := &fakeGroup{n: n, serving: true}
	n.g = f
	t.Cleanup(func() { n.Close() })
	return n, f
}

// req is one HTTP request of a test and the answer it should get.
type req struct {
	method, path, body string
	header             map[string]string
	code               int
	// want is the exact body, or, starting with "~", a part of it.
	want string
	// index is the X-Convoy-Index header wanted ("" for none).
	index string
}

func (r req) do(t *testing.T, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	return r.doCtx(t, context.Background(), h)
}

func (r req) doCtx(t *testing.T, ctx context.Context, h http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	hr := httptest.NewRequestWithContext(ctx, r.method, r.path, strings.NewReader(r.body))
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	return w
}

func (r req) check(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	body := w.Body.String()
	if w.Code != r.code {
		t.Fatalf("%s %s: %d %s, want %d", r.method, r.path, w.Code, body, r.code)
	}
	if want, ok := strings.CutPrefix(r.want, "~"); ok {
		if !strings.Contains(body, want) {
			t.Fatalf("%s %s: body %q, want it to contain %q", r.method, r.path, body, want)
		}
	} else if body != r.want {
		t.Fatalf("%s %s: body %q, want %q", r.method, r.path, body, r.want)
	}
	if got := w.Header().Get(IndexHeader); got != r.index {
		t.Fatalf("%s %s: %s %q, want %q", r.method, r.path, IndexHeader, got, r.index)
	}
	if w.Code != http.StatusOK || !strings.HasPrefix(r.path, "/kv/") || r.method != http.MethodGet {
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("%s %s: Content-Type %q, want JSON", r.method, r.path, ct)
		}
	}
}

// TestHTTPAPI runs scripts of requests against one node; each step's
// answer is checked in full. Deliveries are numbered from 1; a
// linearizable read (a Sync) takes none.
func TestHTTPAPI(t *testing.T) {
	key := func(id string) map[string]string { return map[string]string{IdempotencyHeader: id} }
	long := strings.Repeat("k", MaxKeyBytes+1)
	for _, tc := range []struct {
		name  string
		steps []req
	}{{
		name: "put, get, delete",
		steps: []req{
			{method: "PUT", path: "/kv/a", body: "hello", code: 200, want: `{"index":1}` + "\n", index: "1"},
			{method: "GET", path: "/kv/a", code: 200, want: "hello", index: "1"},
			{method: "GET", path: "/kv/a?stale=true", code: 200, want: "hello", index: "1"},
			{method: "GET", path: "/kv/b", code: 404, want: `{"error":"not found"}` + "\n", index: "1"},
			{method: "DELETE", path: "/kv/a", code: 200, want: `{"index":2}` + "\n", index: "2"},
			{method: "DELETE", path: "/kv/a", code: 404, want: `{"error":"not found"}` + "\n", index: "3"},
			{method: "GET", path: "/kv/a", code: 404, want: `{"error":"not found"}` + "\n", index: "3"},
		},
	}, {
		name: "empty values and escaped keys",
		steps: []req{
			{method: "PUT", path: "/kv/a%2Fb%20c", body: "", code: 200, want: `{"index":1}` + "\n", index: "1"},
			{method: "GET", path: "/kv/a%2Fb%20c", code: 200, want: "", index: "1"},
			{method: "GET", path: "/kv/a", code: 404, want: `{"error":"not found"}` + "\n", index: "1"},
		},
	}, {
		name: "cas",
		steps: []req{
			{method: "POST", path: "/kv/c/cas", body: `{"old":null,"new":"1"}`, code: 200, want: `{"ok":true,"index":1}` + "\n", index: "1"},
			{method: "POST", path: "/kv/c/cas", body: `{"new":"2"}`, code: 200, want: `{"ok":false,"index":2}` + "\n", index: "2"},
			{method: "POST", path: "/kv/c/cas", body: `{"old":"0","new":"2"}`, code: 200, want: `{"ok":false,"index":3}` + "\n", index: "3"},
			{method: "POST", path: "/kv/c/cas", body: `{"old":"1","new":"2"}`, code: 200, want: `{"ok":true,"index":4}` + "\n", index: "4"},
			{method: "GET", path: "/kv/c", code: 200, want: "2", index: "4"},
		},
	}, {
		name: "a retried write is applied once and answered with the original result",
		steps: []req{
			{method: "PUT", path: "/kv/a", body: "1", header: key("w1"), code: 200, want: `{"index":1}` + "\n", index: "1"},
			{method: "PUT", path: "/kv/a", body: "2", header: key("w2"), code: 200, want: `{"index":2}` + "\n", index: "2"},
			{method: "PUT", path: "/kv/a", body: "1", header: key("w1"), code: 200, want: `{"index":1}` + "\n", index: "1"},
			{method: "GET", path: "/kv/a", code: 200, want: "2", index: "3"},
			{method: "DELETE", path: "/kv/a", header: key("d1"), code: 200, want: `{"index":4}` + "\n", index: "4"},
			{method: "DELETE", path: "/kv/a", header: key("d1"), code: 200, want: `{"index":4}` + "\n", index: "4"},
			{method: "POST", path: "/kv/a/cas", body: `{"new":"x"}`, header: key("c1"), code: 200, want: `{"ok":true,"index":6}` + "\n", index: "6"},
			{method: "POST", path: "/kv/a/cas", body: `{"new":"x"}`, header: key("c1"), code: 200, want: `{"ok":true,"index":6}` + "\n", index: "6"},
			// Without a key, nothing is deduplicated.
			{method: "POST", path: "/kv/a/cas", body: `{"new":"x"}`, code: 200, want: `{"ok":false,"index":8}` + "\n", index: "8"},
		},
	}, {
		name: "malformed requests",
		steps: []req{
			{method: "PUT", path: "/kv/", body: "x", code: 400, want: `{"error":"empty key"}` + "\n"},
			{method: "GET", path: "/kv/", code: 400, want: `{"error":"empty key"}` + "\n"},
			{method: "PUT", path: "/kv/" + long, body: "x", code: 400, want: "~limit 1024"},
			{method: "GET", path: "/kv/" + long, code: 400, want: "~limit 1024"},
			{method: "PUT", path: "/kv/a", body: "x", header: key(strings.Repeat("i", MaxRequestIDBytes+1)), code: 400, want: "~Idempotency-Key"},
			{method: "GET", path: "/kv/a?stale=maybe", code: 400, want: "~stale"},
			{method: "POST", path: "/kv/a/cas", body: `{"old":"x"`, code: 400, want: "~bad JSON"},
			{method: "POST", path: "/kv/a/cas", body: `{"old":"x","new":"y","older":"z"}`, code: 400, want: "~unknown field"},
			{method: "POST", path: "/kv/a/cas", body: `{"old":"x"}`, code: 400, want: `{"error":"\"new\" is required"}` + "\n"},
			{method: "POST", path: "/kv/a/cas", body: `{"new":"y"} {}`, code: 400, want: "~after the object"},
			{method: "POST", path: "/kv/a/cas", body: `{"new":5}`, code: 400, want: "~bad JSON"},
			{method: "PATCH", path: "/kv/a", code: 405, want: "~PATCH not allowed"},
			{method: "GET", path: "/kv/a/cas", code: 405, want: "~GET not allowed"},
			{method: "GET", path: "/nothing", code: 404, want: `{"error":"no such endpoint"}` + "\n"},
			// Nothing was sent.
			{method: "GET", path: "/kv/a?stale=1", code: 404, want: `{"error":"not found"}` + "\n", index: "0"},
		},
	}, {
		name: "status",
		steps: []req{
			{method: "PUT", path: "/kv/a", body: "x", code: 200, want: `{"index":1}` + "\n", index: "1"},
			{method: "GET", path: "/status", code: 200, want: `{"id":1,"epoch":3,"members":[1,2],"serving":true,"applied":1}` + "\n"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := newTestNode(t, Options{})
			for _, r := range tc.steps {
				r.check(t, r.do(t, n.Handler()))
			}
		})
	}
}

// TestHTTPTooLarge: values above MaxValueBytes get 413, whether the
// length is announced or not.
func TestHTTPTooLarge(t *testing.T) {
	n, _ := newTestNode(t, Options{MaxValueBytes: 8})
	h := n.Handler()
	for _, r := range []req{
		{method: "PUT", path: "/kv/a", body: "12345678", code: 200, want: `{"index":1}` + "\n", index: "1"},
		{method: "PUT", path: "/kv/a", body: "123456789", code: 413, want: "~limit 8"},
		{method: "POST", path: "/kv/a/cas", body: `{"old":"12345678","new":"123456789"}`, code: 413, want: "~above 8 bytes"},
		{method: "POST", path: "/kv/a/cas", body: `{"old":"123456789","new":"1"}`, code: 413, want: "~above 8 bytes"},
		{method: "POST", path: "/kv/a/cas", body: `{"new":"` + strings.Repeat("x", 5000) + `"}`, code: 413, want: "~limit 4128"},
	} {
		r.check(t, r.do(t, h))
	}
	// A chunked body, of no announced length.
	hr := httptest.NewRequest("PUT", "/kv/a", io.MultiReader(strings.NewReader("12345"), strings.NewReader("6789")))
	hr.ContentLength = -1
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	req{method: "PUT", path: "/kv/a", code: 413, want: "~above 8 bytes"}.check(t, w)
	// The group's own limit maps to 413 as well.
	n2, f := newTestNode(t, Options{})
	f.set(func(f *fakeGroup) { f.err = fmt.Errorf("wrapped: %w", convoy.ErrTooLarge) })
	r := req{method: "PUT", path: "/kv/a", body: "x", code: 413, want: "~too large"}
	r.check(t, r.do(t, n2.Handler()))
}

// TestHTTPUnavailable: whenever this member cannot serve, the answer is
// 503, so that clients try another member.
func TestHTTPUnavailable(t *testing.T) {
	put := req{method: "PUT", path: "/kv/a", body: "x", code: 503}
	get := req{method: "GET", path: "/kv/a", code: 503}
	stale := req{method: "GET", path: "/kv/a?stale=true", code: 503}
	for _, tc := range []struct {
		name  string
		setup func(f *fakeGroup)
		reqs  []req
	}{
		{"not a member", func(f *fakeGroup) { f.err = convoy.ErrNotMember }, []req{put, get}},
		{"excluded", func(f *fakeGroup) { f.err = fmt.Errorf("x: %w", convoy.ErrExcluded) }, []req{put, get}},
		{"left", func(f *fakeGroup) { f.err = convoy.ErrLeft }, []req{put, get}},
		{"failed", func(f *fakeGroup) { f.err = fmt.Errorf("x: %w", convoy.ErrFailed) }, []req{put, get}},
		{"closed", func(f *fakeGroup) { f.closed = true }, []req{put, get}},
		{"in no view", func(f *fakeGroup) { f.serving = false }, []req{stale}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, f := newTestNode(t, Options{})
			f.set(tc.setup)
			for _, r := range tc.reqs {
				r.want = "~" + `"error":`
				r.check(t, r.do(t, n.Handler()))
			}
		})
	}
	t.Run("node closed", func(t *testing.T) {
		n, _ := newTestNode(t, Options{})
		n.Close()
		for _, r := range []req{put, get, stale} {
			r.want = "~node closing"
			r.check(t, r.do(t, n.Handler()))
		}
	})
	t.Run("request context ends", func(t *testing.T) {
		n, f := newTestNode(t, Options{})
		f.set(func(f *fakeGroup) { f.hold = true })
		for _, r := range []req{put, get} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			r.want = "~deadline exceeded"
			r.check(t, r.doCtx(t, ctx, n.Handler()))
			cancel()
		}
	})
}

// TestHTTPWaitingRequests: how requests waiting for their command end
// when the member closes, is excluded, or learns the result late.
func TestHTTPWaitingRequests(t *testing.T) {
	// start sends r in the background once the fake holds commands, and
	// returns its answer's channel once the command was sent.
	start := func(t *testing.T, n *Node, f *fakeGroup, r req) <-chan *httptest.ResponseRecorder {
		t.Helper()
		out := make(chan *httptest.ResponseRecorder, 1)
		go func() { out <- r.do(t, n.Handler()) }()
		waitFor(t, func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.held) > 0 || len(f.heldSyncs) > 0
		})
		return out
	}
	put := req{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IdempotencyHeader: "p1"}}
	get := req{method: "GET", path: "/kv/a"}

	t.Run("close ends them with 503", func(t *testing.T) {
		for _, r := range []req{put, get} {
			n, f := newTestNode(t, Options{})
			f.set(func(f *fakeGroup) { f.hold = true })
			done := start(t, n, f, r)
			n.Close()
			r.code, r.want = 503, "~node closing"
			r.check(t, <-done)
		}
	})
	t.Run("exclusion ends them with 503", func(t *testing.T) {
		for _, r := range []req{put, get} {
			n, f := newTestNode(t, Options{})
			f.set(func(f *fakeGroup) { f.hold = true })
			done := start(t, n, f, r)
			n.onView(convoy.View{Epoch: 4, Excluded: true})
			r.code, r.want = 503, "~excluded by view 4"
			if r.method == "GET" {
				// The group ends a read's Sync itself.
				f.failSyncs(fmt.Errorf("%w: view 4", convoy.ErrExcluded))
				r.want = "~excluded from the group"
			}
			r.check(t, <-done)
		}
	})
	t.Run("a write whose Send failed is answered if it is applied after all", func(t *testing.T) {
		n, f := newTestNode(t, Options{})
		n.maybeSentWait = time.Minute
		f.set(func(f *fakeGroup) { f.hold, f.err = true, fmt.Errorf("x: %w", convoy.ErrExcluded) })
		done := start(t, n, f, put)
		f.set(func(f *fakeGroup) { f.err = nil })
		f.release()
		r := put
		r.code, r.want, r.index = 200, `{"index":1}`+"\n", "1"
		r.check(t, <-done)
	})
	t.Run("a write is answered from restored state", func(t *testing.T) {
		n, f := newTestNode(t, Options{})
		f.set(func(f *fakeGroup) { f.hold = true })
		done := start(t, n, f, put)
		// Another member applied it, and this one gets that state.
		other := newState(n.log)
		other.apply(nil, 7, put.putPayload())
		var parts [][]byte
		for p := range 2 {
			var b strings.Builder
			if err := other.snapshot(&b, p, 2); err != nil {
				t.Fatal(err)
			}
			parts = append(parts, []byte(b.String()))
		}
		if err := (stateMachine{n}).Restore(readers(parts)); err != nil {
			t.Fatal(err)
		}
		r := put
		r.code, r.want, r.index = 200, `{"index":7}`+"\n", "7"
		r.check(t, <-done)
	})
}

// putPayload is the command a PUT request sends.
func (r req) putPayload() []byte {
	return put(r.header[IdempotencyHeader], strings.TrimPrefix(r.path, "/kv/"), r.body)
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestStatusJSON: an idle node reports an empty member list, not null.
func TestStatusJSON(t *testing.T) {
	opts, _ := Options{}.withDefaults(convoy.Config{})
	n, err := newNode(9, opts) // no group yet
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(mustMarshal(t, n.Status()), &s); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s) != "map[applied:0 epoch:0 id:9 members:[] serving:false]" {
		t.Fatalf("status %v", s)
	}
	n.Close()
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIssued: a write's issued time, from its Request-Issued header (or
// a stream request's Issued), or this member's clock without one. One
// ahead of the member's clock by more than MaxIssuedAhead is refused
// with 400; one expired by the member's clock, or by the state
// machine's when it is delivered, ends with 409, over HTTP and streams.
func TestIssued(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	issued := func(id string, d time.Duration) map[string]string {
		return map[string]string{IdempotencyHeader: id, IssuedHeader: strconv.FormatInt(now.Add(d).UnixNano(), 10)}
	}
	const expiredBody = `{"error":"paxos: request expired before it was applied"}` + "\n"
	n, f := newTestNode(t, Options{})
	n.now = func() time.Time { return now }
	for _, r := range []req{
		{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IssuedHeader: "soon"}, code: 400, want: "~Request-Issued"},
		{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IssuedHeader: "0"}, code: 400, want: "~Request-Issued"},
		{method: "PUT", path: "/kv/a", body: "x", header: map[string]string{IssuedHeader: "-5"}, code: 400, want: "~Request-Issued"},
		{method: "PUT", path: "/kv/a", body: "x", header: issued("w0", MaxIssuedAhead+time.Nanosecond), code: 400, want: "~ahead"},
		// Expired by this member's clock: not sent.
		{method: "DELETE", path: "/kv/a", header: issued("w1", -RequestLifetime-time.Nanosecond), code: 409, want: expiredBody},
		// The state machine's clock moves to now + MaxIssuedAhead.
		{method: "PUT", path: "/kv/a", body: "1", header: issued("w2", MaxIssuedAhead), code: 200, want: `{"index":1}` + "\n", index: "1"},
		{method: "PUT", path: "/kv/a", body: "2", header: issued("w3", MaxIssuedAhead-RequestLifetime), code: 200, want: `{"index":2}` + "\n", index: "2"},
		// Sent, and expired by the state machine's clock once delivered.
		{method: "POST", path: "/kv/a/cas", body: `{"new":"3"}`, header: issued("w4", MaxIssuedAhead-RequestLifetime-time.Nanosecond), code: 409, want: expiredBody},
		{method: "PUT", path: "/kv/a", body: "4", header: issued("w4", MaxIssuedAhead-RequestLifetime-time.Nanosecond), code: 409, want: expiredBody},
		// Stamped with the member's clock.
		{method: "PUT", path: "/kv/b", body: "5", code: 200, want: `{"index":5}` + "\n", index: "5"},
		{method: "GET", path: "/kv/a", code: 200, want: "2", index: "5"},
	} {
		r.check(t, r.do(t, n.Handler()))
	}
	f.mu.Lock()
	index, last := f.index, f.last
	f.mu.Unlock()
	if index != 5 {
		t.Fatalf("%d commands delivered, want 5", index)
	}
	if c, err := decodeCommand(last); err != nil || c.issued != now.UnixNano() {
		t.Fatalf("the last command: %+v, %v; want it issued at the member's clock", c, err)
	}
	for _, tc := range []struct {
		issued time.Duration
		status uint16
		body   string
	}{
		{MaxIssuedAhead + 1, 400, "ahead"},
		{-RequestLifetime - 1, 409, "expired"},
		{MaxIssuedAhead - RequestLifetime - 1, 409, "expired"},
		{0, 200, ""},
	} {
		resp := n.serveRequest(t.Context(), wire.Request{Tag: 1, Op: wire.OpPut, Key: "c", ID: fmt.Sprint("s", tc.issued), Value: []byte("v"), Issued: now.Add(tc.issued).UnixNano()})
		if resp.Status != tc.status || !strings.Contains(string(resp.Body), tc.body) {
			t.Errorf("stream write issued %v from now: %d %q, want %d %q", tc.issued, resp.Status, resp.Body, tc.status, tc.body)
		}
	}
}

// TestPendingExpired: an expired result ends the waits of commands
// issued no later than the expired one's; a wait for a command issued
// later (a retry the member stamped itself) goes on, for its own result.
func TestPendingExpired(t *testing.T) {
	p := newPending()
	var chs []chan outcome
	for _, issued := range []int64{5, 10, 11} {
		ch, err := p.add("x", issued)
		if err != nil {
			t.Fatal(err)
		}
		chs = append(chs, ch)
	}
	p.complete("x", 10, result{index: 3, expired: true})
	for i, want := range []bool{true, true, false} {
		select {
		case o := <-chs[i]:
			if !want || !o.res.expired {
				t.Fatalf("wait %d ended with %+v", i, o)
			}
		default:
			if want {
				t.Fatalf("wait %d goes on", i)
			}
		}
	}
	p.complete("x", 11, ok(4))
	if o := <-chs[2]; o.res != ok(4) {
		t.Fatalf("the later wait ended with %+v", o)
	}
	if ids := p.ids(); len(ids) != 0 {
		t.Fatalf("still waiting for %v", ids)
	}
}
