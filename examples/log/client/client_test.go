package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/internal/httpauth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fake is a member that answers every request with one canned response
// and records what it got.
type fake struct {
	srv    *httptest.Server
	mu     sync.Mutex
	status int
	body   string
	got    []string // "METHOD URI key=KEY body=BODY"
	// answered, if set, is called after each answer with the number of
	// requests so far.
	answered func(n int)
}

func newFake(t *testing.T, status int, body string) *fake {
	f := &fake{status: status, body: body}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.got = append(f.got, fmt.Sprintf("%s %s key=%s body=%s", r.Method, r.URL.RequestURI(), r.Header.Get("Idempotency-Key"), b))
		status, body, n, answered := f.status, f.body, len(f.got), f.answered
		f.mu.Unlock()
		w.WriteHeader(status)
		io.WriteString(w, body)
		if answered != nil {
			answered(n)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// deadURL returns the URL of a server that is gone (connections are
// refused).
func deadURL(t *testing.T) string {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	return srv.URL
}

func newClient(t *testing.T, urls ...string) *Client {
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return New(urls, WithHTTPClient(hc), WithBackoff(time.Millisecond))
}

func keyOf(request string) string {
	_, rest, _ := strings.Cut(request, "key=")
	key, _, _ := strings.Cut(rest, " ")
	return key
}

// TestFailover: a member answering 503 and one that cannot be reached
// are skipped; the retried append carries the same request id, the next
// append another one; the member that answered is tried first next.
func TestFailover(t *testing.T) {
	busy := newFake(t, 503, `{"error":"unavailable: not a member"}`)
	ok := newFake(t, 200, `{"position":7}`)
	c := newClient(t, busy.srv.URL, deadURL(t), ok.srv.URL)
	ctx := context.Background()
	pos, err := c.Append(ctx, []byte("hello"), "a", "b")
	if err != nil || pos != 7 {
		t.Fatalf("Append: %d, %v", pos, err)
	}
	first, second := busy.requests(), ok.requests()
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("requests: busy %q, ok %q", first, second)
	}
	if want := "POST /log?streams=a%2Cb key="; !strings.HasPrefix(second[0], want) || !strings.HasSuffix(second[0], " body=hello") {
		t.Fatalf("request %q", second[0])
	}
	if keyOf(first[0]) == "" || keyOf(first[0]) != keyOf(second[0]) {
		t.Fatalf("the retry changed the request id: %q then %q", first[0], second[0])
	}
	if _, err := c.Append(ctx, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if got := ok.requests(); len(got) != 2 || len(busy.requests()) != 1 || keyOf(got[1]) == keyOf(got[0]) {
		t.Fatalf("second append: busy got %q, ok got %q", busy.requests(), got)
	}
}

// TestNoMemberAvailable: when every member answers 503 or is gone, the
// client keeps trying, with backoff, until the context ends (here once
// the busy member has answered twice).
func TestNoMemberAvailable(t *testing.T) {
	busy := newFake(t, 503, `{"error":"unavailable: closing"}`)
	c := newClient(t, busy.srv.URL, deadURL(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	busy.mu.Lock()
	busy.answered = func(n int) {
		if n == 2 {
			cancel()
		}
	}
	busy.mu.Unlock()
	_, err := c.Tail(ctx)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Tail: %v, want ErrUnavailable and the context's end", err)
	}
	if n := len(busy.requests()); n < 2 {
		t.Fatalf("the busy member got %d requests, want retries", n)
	}
	if _, err := New(nil).Tail(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Tail without members: %v", err)
	}
}

// TestErrors: how answers map to errors, and which are not retried.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
	}{
		{404, `{"error":"unwritten"}`, ErrUnwritten},
		{410, `{"error":"trimmed"}`, ErrTrimmed},
		{400, `{"error":"bad request: bad stream name"}`, ErrBadRequest},
		{413, `{"error":"entry too large"}`, ErrTooLarge},
		{404, "404 page not found", nil},
		{500, "boom", nil},
	} {
		t.Run(fmt.Sprint(tc.status, " ", tc.body), func(t *testing.T) {
			f := newFake(t, tc.status, tc.body)
			other := newFake(t, 200, "never")
			c := newClient(t, f.srv.URL, other.srv.URL)
			_, err := c.Read(context.Background(), 3)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Read: %v, want %v", err, tc.want)
			}
			for _, sentinel := range []error{ErrUnwritten, ErrTrimmed, ErrBadRequest, ErrTooLarge, ErrUnavailable} {
				if sentinel != tc.want && errors.Is(err, sentinel) {
					t.Fatalf("Read: %v is %v", err, sentinel)
				}
			}
			if len(other.requests()) != 0 {
				t.Fatal("an error other than 503 was retried on another member")
			}
		})
	}
}

// TestRequests: what each method sends and how it reads the answer.
func TestRequests(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, body string
		call       func(c *Client) (any, error)
		request    string // without the key
		keyed      bool
		want       string
	}{
		{"append", `{"position":3}`, func(c *Client) (any, error) { return c.Append(ctx, []byte("x")) },
			"POST /log body=x", true, "3"},
		{"read", "raw\x00bytes", func(c *Client) (any, error) { b, err := c.Read(ctx, 12); return string(b), err },
			"GET /log/12 body=", false, "raw\x00bytes"},
		{"range", `[{"position":4,"data":"YQ=="},{"position":6,"data":""}]`,
			func(c *Client) (any, error) { return c.ReadRange(ctx, 4, 9) },
			"GET /log?from=4&to=9 body=", false, "[{4 [97]} {6 []}]"},
		{"tail", `{"tail":41}`, func(c *Client) (any, error) { return c.Tail(ctx) },
			"GET /log/tail body=", false, "41"},
		{"trim", `{"trim":5}`, func(c *Client) (any, error) { return c.Trim(ctx, 5) },
			"POST /log/trim?before=5 body=", true, "5"},
		{"stream", `[{"position":2,"data":"Yg=="}]`, func(c *Client) (any, error) { return c.ReadStream(ctx, "orders:eu", 1) },
			"GET /streams/orders:eu?from=1 body=", false, "[{2 [98]}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, 200, tc.body)
			got, err := tc.call(newClient(t, f.srv.URL+"/"))
			if err != nil || fmt.Sprint(got) != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
			reqs := f.requests()
			if len(reqs) != 1 {
				t.Fatalf("requests %q", reqs)
			}
			key := keyOf(reqs[0])
			if (key != "") != tc.keyed || strings.Replace(reqs[0], " key="+key, "", 1) != tc.request {
				t.Fatalf("request %q, want %q (keyed: %v)", reqs[0], tc.request, tc.keyed)
			}
		})
	}
}

// TestStatus asks one given member, without failover.
func TestStatus(t *testing.T) {
	f := newFake(t, 200, `{"id":2,"epoch":5,"members":[1,2,3],"serving":true,"applied":99,"trim":3,"tail":40}`)
	c := newClient(t, deadURL(t))
	s, err := c.Status(context.Background(), f.srv.URL)
	want := Status{ID: 2, Epoch: 5, Members: []uint64{1, 2, 3}, Serving: true, Applied: 99, Trim: 3, Tail: 40}
	if err != nil || fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("Status: %+v, %v", s, err)
	}
	if _, err := c.Status(context.Background(), deadURL(t)); err == nil {
		t.Fatal("Status of a member that is gone succeeded")
	}
}

// TestRequestIDs: ids are unique per write and share the client's
// random part.
func TestRequestIDs(t *testing.T) {
	a, b := New(nil), New(nil)
	ids := map[string]bool{}
	for range 100 {
		ids[a.newRequestID()] = true
		ids[b.newRequestID()] = true
	}
	if len(ids) != 200 {
		t.Fatalf("%d distinct ids of 200", len(ids))
	}
	id := a.newRequestID()
	random, counter, ok := strings.Cut(id, "-")
	if !ok || len(random) != 32 || counter != "101" {
		t.Fatalf("request id %q: want 32 hex digits (128 bits), '-', the counter", id)
	}
}

// TestToken: members that serve over TLS behind a bearer token
// (httpauth, as "convoy node -http-token-file" does) answer a Client
// with the token, and refuse one without it or with another at once:
// ErrUnauthorized, with no other member tried, since all want the same
// token.
func TestToken(t *testing.T) {
	const token = "JBSWY3DPEHPK3PXP"
	var mu sync.Mutex
	requests := 0
	guarded, err := httpauth.Bearer(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"tail": 7}`)
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		guarded.ServeHTTP(w, r)
	}))
	defer srv.Close()
	hc := srv.Client()
	defer hc.CloseIdleConnections()
	urls := []string{srv.URL, srv.URL}

	tail, err := New(urls, WithHTTPClient(hc), WithToken(token)).Tail(t.Context())
	if err != nil || tail != 7 {
		t.Fatalf("with the token: tail %d, %v; want 7", tail, err)
	}
	for _, opts := range [][]Option{{WithHTTPClient(hc)}, {WithHTTPClient(hc), WithToken("another")}} {
		mu.Lock()
		requests = 0
		mu.Unlock()
		_, err := New(urls, opts...).Tail(t.Context())
		mu.Lock()
		n := requests
		mu.Unlock()
		if !errors.Is(err, ErrUnauthorized) || n != 1 {
			t.Errorf("%d options: %v after %d requests; want ErrUnauthorized after 1", len(opts), err, n)
		}
	}
}

// TestRetryAfter: a member at capacity answers 503 with Retry-After; the
// client waits that long (and up to half as long again) before it tries
// again, with the same request id, and the append then lands. A 503
// without Retry-After is retried after the short backoff only. The member
// answers in the process (handlerTransport), so that the test runs on
// synctest's clock and the pauses are exact.
func TestRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Time
		var keys []string
		member := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			at = append(at, time.Now())
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			n := len(at)
			mu.Unlock()
			switch n {
			case 1:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"error":"sharedlog: unavailable: sharedlog: member at capacity"}`)
			case 3:
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, `{"error":"sharedlog: unavailable: closing"}`)
			default:
				io.WriteString(w, `{"position":3}`)
			}
		})
		c := New([]string{"http://member.test"}, WithHTTPClient(&http.Client{Transport: handlerTransport{member}}), WithBackoff(time.Millisecond))
		if pos, err := c.Append(context.Background(), []byte("x")); err != nil || pos != 3 {
			t.Fatalf("Append: %d, %v", pos, err)
		}
		if pos, err := c.Append(context.Background(), []byte("y")); err != nil || pos != 3 {
			t.Fatalf("second Append: %d, %v", pos, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 4 || keys[0] != keys[1] || keys[2] != keys[3] || keys[0] == keys[2] {
			t.Fatalf("%d requests with ids %q, want two tries of each append", len(at), keys)
		}
		if d := at[1].Sub(at[0]); d < time.Second || d > 1500*time.Millisecond {
			t.Errorf("retried %v after a Retry-After of 1s, want 1s to 1.5s", d)
		}
		if d := at[3].Sub(at[2]); d < 500*time.Microsecond || d > 1500*time.Microsecond {
			t.Errorf("retried %v after a 503 without Retry-After, want the first backoff, 0.5ms to 1.5ms", d)
		}
	})
}

// handlerTransport is an http.RoundTripper that answers every request
// with its handler, in the process.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	w := httptest.NewRecorder()
	ht.h.ServeHTTP(w, r)
	if r.Body != nil {
		r.Body.Close()
	}
	resp := w.Result()
	resp.Request = r
	return resp, nil
}
