package sharedlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
)

// loopback stands in for a group of one: Send delivers at once, in
// order, unless told to fail or to hold messages back.
type loopback struct {
	mu    sync.Mutex
	n     *Node
	index uint64
	// err, if set, is what Send returns (without sending).
	err error
	// hold keeps accepted messages undelivered (until release), and
	// Syncs waiting (syncs) until release or Close.
	hold   bool
	held   [][]byte
	syncs  []chan error
	closed bool
}

func (l *loopback) Send(_ context.Context, payload []byte, _ ...convoy.SendOption) (convoy.Receipt, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return convoy.Receipt{}, l.err
	}
	if l.hold {
		l.held = append(l.held, payload)
		return convoy.Receipt{}, nil
	}
	l.deliverLocked(payload)
	return convoy.Receipt{}, nil
}

// Sync returns the index delivered so far (a loopback delivers every
// message as it is sent), or, while messages are held, once release
// delivers them; Close ends it with convoy.ErrClosed.
func (l *loopback) Sync(ctx context.Context) (uint64, error) {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return 0, convoy.ErrClosed
	case l.err != nil:
		l.mu.Unlock()
		return 0, l.err
	case !l.hold:
		defer l.mu.Unlock()
		return l.index, nil
	}
	ch := make(chan error, 1)
	l.syncs = append(l.syncs, ch)
	l.mu.Unlock()
	select {
	case err := <-ch:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.index, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (l *loopback) deliverLocked(payload []byte) {
	l.index++
	l.n.deliver(convoy.Delivery{Epoch: 1, Index: l.index, Sender: l.n.self, Payload: payload})
}

// release delivers the messages held back.
func (l *loopback) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.held {
		l.deliverLocked(p)
	}
	l.held, l.hold = nil, false
	for _, ch := range l.syncs {
		ch <- nil
	}
	l.syncs = nil
}

func (l *loopback) View() (convoy.View, bool) {
	return convoy.View{Epoch: 3, Members: []convoy.Member{{ID: 7}}}, true
}

func (l *loopback) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for _, ch := range l.syncs {
		ch <- convoy.ErrClosed
	}
	l.syncs = nil
	return nil
}

func (l *loopback) setErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = err
}

func (l *loopback) setHold() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hold = true
}

// pending returns how many messages are held back.
func (l *loopback) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held) + len(l.syncs)
}

// newLoopbackNode returns a node of member 7 on a loopback group, with
// entries limited to 16 bytes.
func newLoopbackNode(t *testing.T) (*Node, *loopback) {
	t.Helper()
	return newLoopbackNodeWith(t, Options{MaxValueBytes: 16, Logger: slog.New(slog.DiscardHandler)})
}

// newLoopbackNodeWith returns a node of member 7 on a loopback group,
// with opts (and the defaults for a group's default configuration).
func newLoopbackNodeWith(t *testing.T, opts Options) (*Node, *loopback) {
	t.Helper()
	opts, err := opts.withDefaults(convoy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNode(7, opts)
	if err != nil {
		t.Fatal(err)
	}
	l := &loopback{n: n}
	n.g = l
	t.Cleanup(func() { n.Close() })
	return n, l
}

// call sends one request to h and returns the status and body.
func call(t *testing.T, h http.Handler, method, target, body string, header ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, strings.TrimSpace(rec.Body.String())
}

// TestHTTP: every route and status of the API, against a log holding
// entries 0..3 ("e0".."e3"; e1 and e3 in stream s, e2 in s and t), with
// 0 trimmed.
func TestHTTP(t *testing.T) {
	tooMany := make([]string, MaxStreams+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint("s", i)
	}
	for _, tc := range []struct {
		name, method, target, body string
		header                     []string
		status                     int
		want                       string // the body, or its start if it ends with "…"
	}{
		{"append", "POST", "/log", "new", nil, 200, `{"position":4}`},
		{"append an empty entry", "POST", "/log", "", nil, 200, `{"position":4}`},
		{"append to streams", "POST", "/log?streams=s,u", "new", nil, 200, `{"position":4}`},
		{"append naming a stream twice", "POST", "/log?streams=u,u", "new", nil, 200, `{"position":4}`},
		{"append with 16 streams", "POST", "/log?streams=" + strings.Join(tooMany[:MaxStreams], ","), "x", nil, 200, `{"position":4}`},
		{"append with a key", "POST", "/log", "new", []string{"Idempotency-Key", "k1"}, 200, `{"position":4}`},
		{"append retried with a key already used", "POST", "/log", "again", []string{"Idempotency-Key", "used"}, 200, `{"position":2}`},
		{"append of exactly the limit", "POST", "/log", strings.Repeat("x", 16), nil, 200, `{"position":4}`},
		{"append above the limit", "POST", "/log", strings.Repeat("x", 17), nil, 413, `{"error":"entry too large…`},
		{"append with a bad stream name", "POST", "/log?streams=a/b", "x", nil, 400, `{"error":"bad request: bad stream name…`},
		{"append with an empty stream name", "POST", "/log?streams=a,,b", "x", nil, 400, `{"error":"bad request: bad stream name…`},
		{"append to stream .", "POST", "/log?streams=.", "x", nil, 400, `{"error":"bad request: bad stream name: \".\" names no path segment"}`},
		{"append to stream ..", "POST", "/log?streams=a,..", "x", nil, 400, `{"error":"bad request: bad stream name: \"..\" names no path segment"}`},
		{"append to stream .a", "POST", "/log?streams=.a", "new", nil, 200, `{"position":4}`},
		{"append with a stream name too long", "POST", "/log?streams=" + strings.Repeat("n", MaxStreamName+1), "x", nil, 400, `{"error":"bad request…`},
		{"append with too many streams", "POST", "/log?streams=" + strings.Join(tooMany, ","), "x", nil, 400, `{"error":"bad request: more than 16 streams"}`},
		{"append with a key too long", "POST", "/log", "x", []string{"Idempotency-Key", strings.Repeat("k", MaxRequestID+1)}, 400, `{"error":"bad request: Idempotency-Key…`},
		{"read", "GET", "/log/2", "", nil, 200, `e2`},
		{"read unwritten", "GET", "/log/4", "", nil, 404, `{"error":"unwritten"}`},
		{"read far beyond the tail", "GET", "/log/18446744073709551615", "", nil, 404, `{"error":"unwritten"}`},
		{"read trimmed", "GET", "/log/0", "", nil, 410, `{"error":"trimmed"}`},
		{"read a bad position", "GET", "/log/x", "", nil, 400, `{"error":"bad request: position \"x\" is not a position"}`},
		{"read a negative position", "GET", "/log/-1", "", nil, 400, `{"error":"bad request…`},
		{"read a position too large", "GET", "/log/18446744073709551616", "", nil, 400, `{"error":"bad request…`},
		{"range", "GET", "/log?from=1&to=3", "", nil, 200, `[{"position":1,"data":"ZTE="},{"position":2,"data":"ZTI="}]`},
		{"range over trimmed and unwritten positions", "GET", "/log?from=0&to=100", "", nil, 200, `[{"position":1,"data":"ZTE="},{"position":2,"data":"ZTI="},{"position":3,"data":"ZTM="}]`},
		{"range without bounds", "GET", "/log", "", nil, 200, `[{"position":1,"data":"ZTE="},{"position":2,"data":"ZTI="},{"position":3,"data":"ZTM="}]`},
		{"empty range", "GET", "/log?from=2&to=2", "", nil, 200, `[]`},
		{"range beyond the tail", "GET", "/log?from=10&to=20", "", nil, 200, `[]`},
		{"range backwards", "GET", "/log?from=3&to=1", "", nil, 400, `{"error":"bad request: from 3 is beyond to 1"}`},
		{"range with a bad bound", "GET", "/log?from=a", "", nil, 400, `{"error":"bad request: from \"a\" is not a position"}`},
		{"tail", "GET", "/log/tail", "", nil, 200, `{"tail":4}`},
		{"trim", "POST", "/log/trim?before=2", "", nil, 200, `{"trim":2}`},
		{"trim behind the trim point", "POST", "/log/trim?before=0", "", nil, 200, `{"trim":1}`},
		{"trim past the tail", "POST", "/log/trim?before=99", "", nil, 200, `{"trim":4}`},
		{"trim without a position", "POST", "/log/trim", "", nil, 400, `{"error":"bad request: before \"\" is not a position"}`},
		{"trim with a bad position", "POST", "/log/trim?before=x", "", nil, 400, `{"error":"bad request…`},
		{"stream", "GET", "/streams/s", "", nil, 200, `[{"position":1,"data":"ZTE="},{"position":2,"data":"ZTI="},{"position":3,"data":"ZTM="}]`},
		{"stream from a position", "GET", "/streams/s?from=2", "", nil, 200, `[{"position":2,"data":"ZTI="},{"position":3,"data":"ZTM="}]`},
		{"another stream", "GET", "/streams/t", "", nil, 200, `[{"position":2,"data":"ZTI="}]`},
		{"unknown stream", "GET", "/streams/nothing", "", nil, 200, `[]`},
		{"stream with a bad name", "GET", "/streams/a%20b", "", nil, 400, `{"error":"bad request: bad stream name…`},
		{"stream with a bad position", "GET", "/streams/s?from=-2", "", nil, 400, `{"error":"bad request…`},
		{"status", "GET", "/status", "", nil, 200, `{"id":7,"epoch":3,"members":[7],"serving":true,"applied":5,"trim":1,"tail":4}`},
		{"unknown path", "GET", "/logs", "", nil, 404, `{"error":"no such endpoint"}`},
		{"another method", "DELETE", "/log/2", "", nil, 405, `{"error":"DELETE not allowed here"}`},
		{"another method of trim", "GET", "/log/trim", "", nil, 400, `{"error":"bad request: position \"trim\" is not a position"}`},
		{"another method of status", "POST", "/status", "", nil, 405, `{"error":"POST not allowed here"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, _ := newLoopbackNode(t)
			h := n.Handler()
			for _, r := range []struct{ target, body, key string }{
				{"/log?streams=", "e0", ""},
				{"/log?streams=s", "e1", ""},
				{"/log?streams=s,t", "e2", "used"},
				{"/log?streams=s", "e3", ""},
				{"/log/trim?before=1", "", ""},
			} {
				if status, body := call(t, h, "POST", r.target, r.body, "Idempotency-Key", r.key); status != 200 {
					t.Fatalf("setting up: %s: %d %s", r.target, status, body)
				}
			}
			status, body := call(t, h, tc.method, tc.target, tc.body, tc.header...)
			if status != tc.status || !matches(body, tc.want) {
				t.Fatalf("%s %s: %d %s\nwant %d %s", tc.method, tc.target, status, body, tc.status, tc.want)
			}
		})
	}
}

// matches reports whether got is want, or starts with want's text
// before a final "…".
func matches(got, want string) bool {
	if prefix, ok := strings.CutSuffix(want, "…"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == want
}

// TestHTTPUnavailable: a member that cannot get commands through the
// group answers 503 to writes and to reads that need a barrier, and
// still serves entries it holds.
func TestHTTPUnavailable(t *testing.T) {
	for _, sendErr := range []error{
		convoy.ErrNotMember,
		convoy.ErrClosed,
		convoy.ErrLeft,
		fmt.Errorf("%w: member 2 crashed", convoy.ErrFailed),
	} {
		t.Run(sendErr.Error(), func(t *testing.T) {
			n, l := newLoopbackNode(t)
			h := n.Handler()
			if status, _ := call(t, h, "POST", "/log", "e0"); status != 200 {
				t.Fatal("setting up failed")
			}
			l.setErr(sendErr)
			for _, tc := range []struct{ method, target string }{
				{"POST", "/log"},
				{"POST", "/log/trim?before=1"},
				{"GET", "/log/tail"},
				{"GET", "/log/1"},
				{"GET", "/log?from=0&to=5"},
				{"GET", "/streams/s"},
			} {
				status, body := call(t, h, tc.method, tc.target, "x")
				if status != 503 || !strings.HasPrefix(body, `{"error":"sharedlog: unavailable: `) {
					t.Errorf("%s %s: %d %s, want 503", tc.method, tc.target, status, body)
				}
			}
			if status, body := call(t, h, "GET", "/log/0", ""); status != 200 || body != "e0" {
				t.Errorf("read of a held entry: %d %s", status, body)
			}
			if status, body := call(t, h, "GET", "/log?from=0&to=1", ""); status != 200 || body != `[{"position":0,"data":"ZTA="}]` {
				t.Errorf("range of held entries: %d %s", status, body)
			}
		})
	}
}

// TestHTTPRequestEnds: a request whose command is not applied before
// the request ends gets 503; the command still takes effect when it is
// delivered, and the retry with the same key gets its result.
func TestHTTPRequestEnds(t *testing.T) {
	n, l := newLoopbackNode(t)
	h := n.Handler()
	l.setHold()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/log", strings.NewReader("late"))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("status %d %s, want 503", rec.Code, rec.Body)
	}
	l.release()
	if status, body := call(t, h, "POST", "/log", "late", "Idempotency-Key", "k"); status != 200 || body != `{"position":0}` {
		t.Fatalf("retry: %d %s", status, body)
	}
	if status, body := call(t, h, "GET", "/log/tail", ""); status != 200 || body != `{"tail":1}` {
		t.Fatalf("tail: %d %s", status, body)
	}
}

// TestHTTPExcluded: requests waiting when this member is excluded end
// with 503 at once.
func TestHTTPExcluded(t *testing.T) {
	n, l := newLoopbackNode(t)
	h := n.Handler()
	l.setHold()
	done := make(chan int)
	go func() {
		status, _ := call(t, h, "POST", "/log", "x")
		done <- status
	}()
	waitFor(t, func() bool { return l.pending() == 1 })
	n.onView(convoy.View{Epoch: 4, Excluded: true})
	if status := <-done; status != 503 {
		t.Fatalf("status %d, want 503", status)
	}
}

// TestHTTPUnsureSend: a request whose Send failed in a way that leaves
// open whether the command went out is answered from the state this
// member restores when it rejoins — with the original result if the
// group applied the command meanwhile, 503 otherwise.
func TestHTTPUnsureSend(t *testing.T) {
	n, l := newLoopbackNode(t)
	h := n.Handler()
	l.setErr(fmt.Errorf("%w: view 4: suspected", convoy.ErrExcluded))
	results := make(chan string, 2)
	for _, key := range []string{"applied-elsewhere", "lost"} {
		go func() {
			status, body := call(t, h, "POST", "/log", "x", "Idempotency-Key", key)
			results <- fmt.Sprintf("%s: %d %s", key, status, body)
		}()
	}
	waitFor(t, func() bool {
		n.waiters.mu.Lock()
		defer n.waiters.mu.Unlock()
		return len(n.waiters.m) == 2
	})
	// The rest of the group applied "applied-elsewhere" at position 5.
	other := testState()
	for i := range 5 {
		other.apply(uint64(i+1), appendCmd(fmt.Sprint(i), "y"))
	}
	other.apply(6, appendCmd("applied-elsewhere", "x"))
	if err := (stateMachine{n}).Restore(readers(snapshot(t, other, 2))); err != nil {
		t.Fatal(err)
	}
	got := []string{<-results, <-results}
	want := map[string]bool{
		`applied-elsewhere: 200 {"position":5}`:                                                         true,
		`lost: 503 {"error":"sharedlog: unavailable: rejoined the group; the request was not applied"}`: true,
	}
	for _, g := range got {
		if !want[g] {
			t.Errorf("unexpected answer %s", g)
		}
	}
}

// TestHTTPClose: Close ends the requests in flight with 503, and later
// requests get 503 too; status says the member no longer serves.
func TestHTTPClose(t *testing.T) {
	n, l := newLoopbackNode(t)
	h := n.Handler()
	if status, _ := call(t, h, "POST", "/log", "e0"); status != 200 {
		t.Fatal("setting up failed")
	}
	l.setHold()
	done := make(chan int)
	go func() {
		status, _ := call(t, h, "GET", "/log/tail", "")
		done <- status
	}()
	waitFor(t, func() bool { return l.pending() == 1 })
	n.Close()
	if status := <-done; status != 503 {
		t.Fatalf("request in flight: %d, want 503", status)
	}
	for _, target := range []string{"/log/0", "/log/tail", "/log?from=0"} {
		if status, body := call(t, h, "GET", target, ""); status != 503 {
			t.Errorf("GET %s after Close: %d %s", target, status, body)
		}
	}
	status, body := call(t, h, "GET", "/status", "")
	var s Status
	if err := json.Unmarshal([]byte(body), &s); status != 200 || err != nil || s.Serving {
		t.Fatalf("status after Close: %d %s", status, body)
	}
}

// TestHTTPBodyTooLarge: a body above the limit without a Content-Length
// (chunked) is cut off at the limit and refused with 413.
func TestHTTPBodyTooLarge(t *testing.T) {
	n, _ := newLoopbackNode(t)
	req := httptest.NewRequest("POST", "/log", strings.NewReader(strings.Repeat("x", 40)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Fatalf("status %d %s, want 413", rec.Code, rec.Body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHTTPSendTooLarge: a command the group refuses as too large is a
// 413.
func TestHTTPSendTooLarge(t *testing.T) {
	n, l := newLoopbackNode(t)
	l.setErr(fmt.Errorf("%w: 99 bytes, limit 10", convoy.ErrTooLarge))
	if status, body := call(t, n.Handler(), "POST", "/log", "x"); status != 413 {
		t.Fatalf("status %d %s, want 413", status, body)
	}
}

// TestOpenRejects: configurations Open refuses before opening the group.
func TestOpenRejects(t *testing.T) {
	durable := &convoy.DurableConfig{Dir: t.TempDir()}
	for _, tc := range []struct {
		name string
		cfg  convoy.Config
		opts Options
		want string
	}{
		{"no durable delivery", convoy.Config{Self: 1}, Options{}, "sharedlog: the log needs durable delivery"},
		{"negative entry limit", convoy.Config{Self: 1, Durable: durable}, Options{MaxValueBytes: -1}, "sharedlog: MaxValueBytes -1 is negative"},
		{"entries beyond the message limit", convoy.Config{Self: 1, Durable: durable, MaxMessageBytes: 1 << 20}, Options{}, "sharedlog: MaxValueBytes 1048576 does not fit"},
		{"negative request limit", convoy.Config{Self: 1, Durable: durable}, Options{MaxRequests: -1}, "sharedlog: MaxRequests, MaxRequestBytes and RetryAfter must not be negative"},
		{"request bytes below the largest append", convoy.Config{Self: 1, Durable: durable}, Options{MaxValueBytes: 100, MaxRequestBytes: 199}, "sharedlog: MaxRequestBytes 199 is below 200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := Open(context.Background(), tc.cfg, tc.opts)
			if err == nil {
				n.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Open: %v, want %q…", err, tc.want)
			}
		})
	}
}
