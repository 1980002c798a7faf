package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seen is a request a fake member received.
type seen struct {
	member       string
	method, path string
	query        string
	key, body    string
	// issued is the Request-Issued header.
	issued string
}

// fakes runs fake members that answer with the handlers given, and
// records every request.
type fakes struct {
	mu   sync.Mutex
	reqs []seen
}

func (f *fakes) server(t *testing.T, name string, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f.handler(name, h))
	t.Cleanup(srv.Close)
	return srv
}

// handler returns h, recording every request as member name's.
func (f *fakes) handler(name string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{member: name, method: r.Method, path: r.URL.EscapedPath(), query: r.URL.RawQuery,
			key: r.Header.Get("Idempotency-Key"), issued: r.Header.Get("Request-Issued"), body: string(b)})
		f.mu.Unlock()
		h(w, r)
	})
}

// inProcess is an http.RoundTripper that hands each request to the
// handler of its URL's host, in this process: no connection, no
// network, for a test in a synctest bubble.
type inProcess map[string]http.Handler

func (p inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	h, ok := p[r.URL.Host]
	if !ok {
		return nil, errors.New("no such member: " + r.URL.Host)
	}
	if r.Body == nil {
		// A server's requests always have a body.
		r = r.Clone(r.Context())
		r.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(rec, r)
	}()
	select {
	case <-done:
		return rec.Result(), nil
	case <-r.Context().Done():
		<-done
		return nil, r.Context().Err()
	}
}

func (f *fakes) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

func answer(code int, body string, index string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if index != "" {
			w.Header().Set("X-Convoy-Index", index)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

var unavailable = answer(503, `{"error":"this member takes part in no view"}`, "")

// newClient returns a client of urls on its own transport, with short
// backoffs.
func newClient(t *testing.T, urls []string, opts ...Option) *Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	opts = append([]Option{WithHTTPClient(&http.Client{Transport: tr}), WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)
	return New(urls, opts...)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// TestFailover: a write goes to the next member on 503 and on a
// connection error, with the same request id every time; the member that
// answered is tried first next time; a new call gets a new id.
func TestFailover(t *testing.T) {
	var f fakes
	a := f.server(t, "a", unavailable)
	dead := f.server(t, "dead", unavailable)
	dead.Close()
	c := f.server(t, "c", answer(200, `{"index":7}`, "7"))
	cl := newClient(t, []string{a.URL, dead.URL, c.URL + "/"})
	index, err := cl.Put(ctx(t), "k", []byte("v"))
	if err != nil || index != 7 {
		t.Fatalf("put: %d %v", index, err)
	}
	if _, err := cl.Put(ctx(t), "k", []byte("w")); err != nil {
		t.Fatal(err)
	}
	got := f.seen()
	if len(got) != 3 || got[0].member != "a" || got[1].member != "c" || got[2].member != "c" {
		t.Fatalf("requests %+v: want a, c, then c again", got)
	}
	if got[0].key == "" || got[0].key != got[1].key || got[2].key == got[0].key {
		t.Fatalf("request ids %q %q %q: want the first two equal, the third new", got[0].key, got[1].key, got[2].key)
	}
	if got[1].method != "PUT" || got[1].path != "/kv/k" || got[1].body != "v" {
		t.Fatalf("request %+v", got[1])
	}
}

// TestAttemptTimeout: a member that holds a request too long is left
// for the next.
// (On the test's clock: the slow member gets the request before the
// attempt's time runs out, however loaded the machine.)
func TestAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakes
		members := inProcess{
			"slow": f.handler("slow", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }),
			"fast": f.handler("fast", answer(200, `{"index":1}`, "1")),
		}
		cl := New([]string{"http://slow", "http://fast"}, WithHTTPClient(&http.Client{Transport: members}),
			WithBackoff(time.Millisecond, 5*time.Millisecond), WithAttemptTimeout(20*time.Millisecond))
		if _, err := cl.Delete(ctx(t), "k"); err != nil {
			t.Fatal(err)
		}
		got := f.seen()
		if len(got) != 2 || got[0].member != "slow" || got[1].member != "fast" || got[0].key != got[1].key {
			t.Fatalf("requests %+v: want the slow member, then the fast one with the same id", got)
		}
	})
}

// TestMaxResponseBytes: an answer above WithMaxResponseBytes fails the
// call with ErrResponseTooLarge, without another try; one at the bound is
// read.
func TestMaxResponseBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakes
		value := strings.Repeat("v", 1000)
		members := inProcess{"m": f.handler("m", answer(200, value, "7"))}
		for _, tc := range []struct {
			max  int64
			want error
		}{
			{max: 1000, want: nil},
			{max: 999, want: ErrResponseTooLarge},
		} {
			cl := New([]string{"http://m"}, WithHTTPClient(&http.Client{Transport: members}), WithMaxResponseBytes(tc.max))
			got, _, err := cl.Get(ctx(t), "k")
			if !errors.Is(err, tc.want) {
				t.Fatalf("max %d: error %v, want %v", tc.max, err, tc.want)
			}
			if tc.want == nil && string(got) != value {
				t.Fatalf("max %d: value of %d bytes, want %d", tc.max, len(got), len(value))
			}
		}
		if n := len(f.seen()); n != 2 {
			t.Fatalf("%d requests, want 2 (one per call)", n)
		}
	})
}

// TestUnavailable: while no member can serve, a call retries until its
// context ends (here after the third answer), and says why.
func TestUnavailable(t *testing.T) {
	var f fakes
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	var answers atomic.Int32
	h := func(w http.ResponseWriter, r *http.Request) {
		unavailable(w, r)
		if answers.Add(1) == 3 {
			cancel()
		}
	}
	a := f.server(t, "a", h)
	b := f.server(t, "b", h)
	cl := newClient(t, []string{a.URL, b.URL})
	_, err := cl.Put(c, "k", nil)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no view") {
		t.Fatalf("err %v: want ErrUnavailable, the context's end and the last answer", err)
	}
	got := f.seen()
	if len(got) < 3 {
		t.Fatalf("%d tries, want several", len(got))
	}
	for _, s := range got {
		if s.key != got[0].key {
			t.Fatalf("request ids differ across retries: %q %q", s.key, got[0].key)
		}
	}
	if _, err := New(nil).Put(c, "k", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no members: %v", err)
	}
}

// TestIssued: the tries of one write carry its request id and the issued
// time of its first try that may have reached the group: a try refused
// at capacity (Retry-After) did not, one that found the member not
// serving may have. A new call has a new id and issued time.
// (On the test's clock: the tries are apart in time.)
func TestIssued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakes
		var tries atomic.Int32
		h := func(w http.ResponseWriter, r *http.Request) {
			switch tries.Add(1) {
			case 1:
				w.Header().Set("Retry-After", "1")
				answer(503, `{"error":"paxos: member at capacity"}`, "")(w, r)
			case 2:
				unavailable(w, r)
			case 3:
				w.Header().Set("Retry-After", "1")
				answer(429, `{"error":"slow down"}`, "")(w, r)
			default:
				answer(200, `{"index":3}`, "3")(w, r)
			}
		}
		cl := New([]string{"http://a"}, WithHTTPClient(&http.Client{Transport: inProcess{"a": f.handler("a", h)}}),
			WithBackoff(time.Millisecond, 5*time.Millisecond))
		if _, err := cl.Put(ctx(t), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		second := time.Now().Add(-time.Second).UnixNano() // before the pause after try 3
		if _, err := cl.Put(ctx(t), "k", []byte("w")); err != nil {
			t.Fatal(err)
		}
		got := f.seen()
		if len(got) != 5 {
			t.Fatalf("%d requests, want 5", len(got))
		}
		issued := make([]int64, len(got))
		for i, s := range got {
			var err error
			if issued[i], err = strconv.ParseInt(s.issued, 10, 64); err != nil {
				t.Fatalf("request %d: Request-Issued %q: %v", i, s.issued, err)
			}
		}
		switch {
		case got[0].key != got[3].key || got[1].key != got[3].key || got[2].key != got[3].key || got[4].key == got[3].key:
			t.Fatalf("request ids %+v: want the first four the same, the fifth new", got)
		case issued[0] >= issued[1] || issued[1] != issued[2] || issued[2] != issued[3]:
			t.Fatalf("issued times %v: want the second try's from then on", issued)
		case issued[4] <= second:
			t.Fatalf("the second call issued at %d, before it began (%d)", issued[4], second)
		}
	})
}

// TestExpiredOnClientClock: a write whose tries may have reached the
// group stops once RequestLifetime has passed since the first of them,
// with ErrExpired, even though its context goes on.
// (On the test's clock: a minute of retries takes none.)
func TestExpiredOnClientClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakes
		cl := New([]string{"http://a", "http://b"}, WithHTTPClient(&http.Client{Transport: inProcess{
			"a": f.handler("a", unavailable), "b": f.handler("b", unavailable),
		}}), WithBackoff(time.Millisecond, time.Second))
		c, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		_, err := cl.Delete(c, "k")
		if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "no view") {
			t.Fatalf("err %v, want ErrExpired with the last answer", err)
		}
		if d := time.Since(start); d < RequestLifetime || d > RequestLifetime+2*time.Second {
			t.Fatalf("the call ended after %v, want %v and at most one pause more", d, RequestLifetime)
		}
		got := f.seen()
		for _, s := range got {
			if s.key != got[0].key || s.issued != got[0].issued {
				t.Fatalf("tries %+v: want one request id and issued time", s)
			}
		}
	})
}

// TestRetryAfter: a member at capacity (503 or 429 with Retry-After, in
// seconds or as a date) is tried again no sooner than it asks, and no
// later than half as long again; with no Retry-After, the backoff is
// short. A pause the context ends first ends the call with the last
// answer.
// (On the test's clock: the pauses are exact.)
func TestRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name       string
		code       int
		retryAfter func() string
		min, max   time.Duration
	}{
		{"503 in seconds", 503, func() string { return "2" }, 2 * time.Second, 3 * time.Second},
		{"429 in seconds", 429, func() string { return "1" }, time.Second, 1500 * time.Millisecond},
		{"503 as a date", 503, func() string { return time.Now().Add(4 * time.Second).UTC().Format(http.TimeFormat) }, 3 * time.Second, 6 * time.Second},
		{"503 without", 503, func() string { return "" }, 0, 5 * time.Millisecond},
		{"503 unreadable", 503, func() string { return "soon" }, 0, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var f fakes
				var tries atomic.Int32
				var refusedAt time.Time
				h := func(w http.ResponseWriter, r *http.Request) {
					if tries.Add(1) == 1 {
						refusedAt = time.Now()
						if v := tc.retryAfter(); v != "" {
							w.Header().Set("Retry-After", v)
						}
						answer(tc.code, `{"error":"paxos: member at capacity"}`, "")(w, r)
						return
					}
					answer(200, `{"index":3}`, "3")(w, r)
				}
				cl := New([]string{"http://a"}, WithHTTPClient(&http.Client{Transport: inProcess{"a": f.handler("a", h)}}),
					WithBackoff(time.Millisecond, 5*time.Millisecond))
				if _, err := cl.Put(ctx(t), "k", []byte("v")); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(refusedAt); d < tc.min || d > tc.max {
					t.Errorf("retried after %v, want %v to %v", d, tc.min, tc.max)
				}
			})
		})
	}
	t.Run("the context ends first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var f fakes
			h := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "5")
				answer(503, `{"error":"paxos: member at capacity"}`, "")(w, r)
			}
			cl := New([]string{"http://a"}, WithHTTPClient(&http.Client{Transport: inProcess{"a": f.handler("a", h)}}))
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			_, err := cl.Put(c, "k", []byte("v"))
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "at capacity") {
				t.Fatalf("err %v, want ErrUnavailable with the deadline and the last answer", err)
			}
			if d := time.Since(start); d != time.Second {
				t.Errorf("the call ended after %v, want its context's second", d)
			}
			if n := len(f.seen()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	})
}

// TestAnswers: how each answer maps to a result, and which are final.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		call func(ctx context.Context, c *Client) (any, error)
		want any
		// err is the error wanted: a sentinel, or an *Error's status.
		err    error
		status int
	}{{
		name: "get",
		h:    answer(200, "the value", "12"),
		call: func(ctx context.Context, c *Client) (any, error) {
			v, i, err := c.Get(ctx, "k")
			return string(v) + "@" + itoa(i), err
		},
		want: "the value@12",
	}, {
		name: "get missing",
		h:    answer(404, `{"error":"not found"}`, "12"),
		call: func(ctx context.Context, c *Client) (any, error) { _, i, err := c.Get(ctx, "k"); return i, err },
		want: uint64(12), err: ErrNotFound,
	}, {
		name: "unknown path",
		h:    answer(404, `{"error":"no such endpoint"}`, ""),
		call: func(ctx context.Context, c *Client) (any, error) { _, _, err := c.GetStale(ctx, "k"); return nil, err },
		want: nil, status: 404,
	}, {
		name: "delete missing",
		h:    answer(404, `{"error":"not found"}`, "3"),
		call: func(ctx context.Context, c *Client) (any, error) { return c.Delete(ctx, "k") },
		want: uint64(3), err: ErrNotFound,
	}, {
		name: "cas",
		h:    answer(200, `{"ok":true,"index":5}`, "5"),
		call: func(ctx context.Context, c *Client) (any, error) {
			ok, i, err := c.CAS(ctx, "k", nil, []byte("n"))
			return [2]any{ok, i}, err
		},
		want: [2]any{true, uint64(5)},
	}, {
		name: "bad request is final",
		h:    answer(400, `{"error":"bad JSON"}`, ""),
		call: func(ctx context.Context, c *Client) (any, error) { return c.Put(ctx, "k", nil) },
		want: uint64(0), status: 400,
	}, {
		name: "expired is final",
		h:    answer(409, `{"error":"paxos: request expired before it was applied"}`, ""),
		call: func(ctx context.Context, c *Client) (any, error) { return c.Put(ctx, "k", nil) },
		want: uint64(0), err: ErrExpired,
	}, {
		name: "too large is final",
		h:    answer(413, `{"error":"body above 8 bytes"}`, ""),
		call: func(ctx context.Context, c *Client) (any, error) { return c.Put(ctx, "k", nil) },
		want: uint64(0), status: 413,
	}, {
		name: "status",
		h:    answer(200, `{"id":2,"epoch":5,"members":[1,2],"serving":true,"applied":9}`, ""),
		call: func(ctx context.Context, c *Client) (any, error) { return c.Status(ctx, c.members[0].url) },
		want: Status{ID: 2, Epoch: 5, Members: []uint64{1, 2}, Serving: true, Applied: 9},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var f fakes
			srv := f.server(t, "a", tc.h)
			other := f.server(t, "b", tc.h)
			got, err := tc.call(ctx(t), newClient(t, []string{srv.URL, other.URL}))
			var e *Error
			switch {
			case tc.status != 0:
				if !errors.As(err, &e) || e.StatusCode != tc.status {
					t.Fatalf("err %v, want a %d", err, tc.status)
				}
			case !errors.Is(err, tc.err):
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if a, b := mustJSON(got), mustJSON(tc.want); a != b {
				t.Fatalf("got %s, want %s", a, b)
			}
			if n := len(f.seen()); n != 1 {
				t.Fatalf("%d requests, want 1 (no retry)", n)
			}
		})
	}
}

// TestRequests: what the client sends.
func TestRequests(t *testing.T) {
	var f fakes
	srv := f.server(t, "a", answer(200, `{"ok":false,"index":1}`, "1"))
	cl := newClient(t, []string{srv.URL})
	old := []byte("é")
	cl.CAS(ctx(t), "a/b c", &old, []byte("new"))
	cl.CAS(ctx(t), "k", nil, []byte(""))
	cl.GetStale(ctx(t), "k")
	cl.Get(ctx(t), "k")
	got := f.seen()
	want := []seen{
		{member: "a", method: "POST", path: "/kv/a%2Fb%20c/cas", body: `{"old":"é","new":"new"}`},
		{member: "a", method: "POST", path: "/kv/k/cas", body: `{"old":null,"new":""}`},
		{member: "a", method: "GET", path: "/kv/k", query: "stale=true"},
		{member: "a", method: "GET", path: "/kv/k"},
	}
	if len(got) != len(want) {
		t.Fatalf("requests %+v", got)
	}
	for i := range want {
		if write := got[i].method == "POST"; write != (got[i].key != "") || write != (got[i].issued != "") {
			t.Fatalf("request %d: %+v: want a request id and an issued time for a write, neither for a read", i, got[i])
		}
		got[i].key, got[i].issued = "", ""
		if got[i] != want[i] {
			t.Fatalf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestInvalidArguments are refused before anything is sent.
func TestInvalidArguments(t *testing.T) {
	cl := New([]string{"http://127.0.0.1:1"})
	for _, k := range []string{"", ".", "..", strings.Repeat("k", MaxKeyBytes+1)} {
		if _, err := cl.Put(ctx(t), k, nil); !errors.Is(err, ErrInvalidKey) {
			t.Fatalf("key %.8q: %v, want ErrInvalidKey", k, err)
		}
	}
	bad := []byte{0xff}
	if _, _, err := cl.CAS(ctx(t), "k", &bad, nil); !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("cas: %v", err)
	}
	if _, _, err := cl.CAS(ctx(t), "k", nil, bad); !errors.Is(err, ErrInvalidValue) {
		t.Fatalf("cas: %v", err)
	}
}

func itoa(i uint64) string { return mustJSON(i) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestAnswerBeforeBreak: an answer read before the stream broke is the
// call's result, not the break, however the waiting call sees the two.
func TestAnswerBeforeBreak(t *testing.T) {
	for i := range 200 {
		conn, peer := net.Pipe()
		peer.Close()
		s := &streamConn{conn: conn, pending: make(map[uint64]chan wire.Response), wake: make(chan struct{}, 1), done: make(chan struct{})}
		ch := make(chan wire.Response, 1)
		want := wire.Response{Tag: 1, Status: http.StatusBadRequest, Body: []byte("empty key")}
		ch <- want // what read does for the answer, then for the end of the stream:
		s.close(&retryable{err: errors.New("client: stream broke: EOF")})
		r, err := s.await(t.Context(), 1, ch, 0)
		if err != nil || r.Status != want.Status || string(r.Body) != string(want.Body) {
			t.Fatalf("try %d: got %+v, %v; want the answer %+v", i, r, err, want)
		}
	}
}
