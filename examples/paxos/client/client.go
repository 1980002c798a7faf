// Package client is a Go client of the replicated key-value store of
// package paxos.
//
// A Client is given the base URLs of the members. It sends each request
// to one member and, when that member cannot serve (503, a connection
// error, or no answer within the attempt timeout), tries the next one
// after a short backoff, until the request's context ends. A member at
// capacity refuses a request at once with 503 (or a proxy with 429) and
// says how long to wait (Retry-After): the Client then waits that long,
// and up to half as long again at random, so that the clients refused
// together do not all come back together. Every write
// carries a request id (a random 128-bit client id and a counter) in the
// Idempotency-Key header, the same for all tries of one call, so a write
// that reached the group before its member failed is applied once and its
// retry gets the original result. It also carries its issued time (the
// Request-Issued header): the time of the call's first try that may have
// reached the group, the same for all later tries. The store applies a
// write only within RequestLifetime of its issued time, which is what
// makes a retry safe however late an earlier try arrives; a call that
// gets no answer within RequestLifetime of it ends with ErrExpired.
//
//	c := client.New([]string{"http://10.0.0.1:7101", "http://10.0.0.2:7101"})
//	index, err := c.Put(ctx, "greeting", []byte("hello"))
//	value, index, err := c.Get(ctx, "greeting")
//
// A write whose call ends with an error (its context ended while members
// were unavailable, or ErrExpired) may or may not have been applied.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"github.com/convoy-gcs/convoy/internal/retry"
)

// Errors returned by the Client's methods.
var (
	// ErrNotFound is returned by Get, GetStale and Delete for a key that
	// does not exist.
	ErrNotFound = errors.New("client: key not found")
	// ErrUnavailable is wrapped, with the context's error and the last
	// member's answer, when no member served the request before the
	// context ended.
	ErrUnavailable = errors.New("client: no member available")
	// ErrInvalidKey is returned for a key the API cannot carry: empty,
	// longer than MaxKeyBytes, or "." or ".." (which URLs resolve).
	ErrInvalidKey = errors.New("client: invalid key")
	// ErrInvalidValue is returned by CAS for a value that is not valid
	// UTF-8 (CAS values travel as JSON strings).
	ErrInvalidValue = errors.New("client: CAS value is not valid UTF-8")
	// ErrClosed is returned by the methods of a closed Client.
	ErrClosed = errors.New("client: closed")
	// ErrUnauthorized is wrapped by the *Error of a 401 answer: the
	// member wants a bearer token (WithToken), and the Client sent none
	// or another.
	ErrUnauthorized = errors.New("client: unauthorized")
	// ErrResponseTooLarge is wrapped when a member's answer over HTTP is
	// larger than WithMaxResponseBytes allows.
	ErrResponseTooLarge = errors.New("client: answer too large")
	// ErrExpired is wrapped when a write expired before it was applied:
	// a member answered 409 (its *Error wraps ErrExpired), or
	// RequestLifetime passed since the call's first try that may have
	// reached the group. That try was not applied, and will never be,
	// but an earlier one may have been: the write's outcome is unknown.
	// The Client does not try again.
	ErrExpired = errors.New("client: write expired before it was applied; whether an earlier try was applied is unknown")
)

// MaxKeyBytes bounds a key (the server's limit).
const MaxKeyBytes = 1 << 10

// RequestLifetime is how long after its issued time a write may still be
// applied (the server's paxos.RequestLifetime): a call stops trying once
// it has passed, on this process's clock.
const RequestLifetime = time.Minute

// Error is an answer the server gave that no retry changes, other than
// 404 for a missing key (ErrNotFound): 400, 413, 500, ...
type Error struct {
	StatusCode int
	// Message is the server's "error" field, or the body.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("client: %d %s: %s", e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Unwrap returns ErrUnauthorized for a 401 answer, ErrExpired for a 409,
// nil for others.
func (e *Error) Unwrap() error {
	switch e.StatusCode {
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusConflict:
		return ErrExpired
	}
	return nil
}

// Status is a member's status (GET /status).
type Status struct {
	ID      uint64   `json:"id"`
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	// Serving says whether the member takes part in its last view.
	Serving bool `json:"serving"`
	// Applied is the index of the last delivery the member applied.
	Applied uint64 `json:"applied"`
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send requests with hc (default
// http.DefaultClient). For members that serve over TLS (https URLs),
// give hc an *http.Transport whose TLSClientConfig trusts their
// certificates: streams (WithStreams) dial with its DialContext and
// TLSClientConfig too.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken makes the Client send token as a bearer token (the header
// "Authorization: Bearer <token>") with every request, stream upgrades
// included, for members that require one. Send it over TLS only.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithBackoff sets the pause before a retry: it starts at min and
// doubles up to max, with jitter (default 5ms to 200ms). A member's
// Retry-After overrides it.
func WithBackoff(min, max time.Duration) Option {
	return func(c *Client) { c.minBackoff, c.maxBackoff = min, max }
}

// WithStreams makes the Client send its requests over streams (package
// wire): one connection per member, upgraded from HTTP, carrying many
// requests at once in a binary encoding, which costs the client and the
// member much less per request than HTTP/JSON. A member that does not
// serve streams, or refuses the upgrade for serving another version of
// them (wire.Protocol), gets HTTP requests instead, for the Client's
// life. Close the Client to close its streams.
func WithStreams() Option { return func(c *Client) { c.streams = true } }

// WithAttemptTimeout bounds one try at one member, so that a member that
// accepts requests but cannot complete them (cut off from the group)
// does not hold a call until its context ends (default 5s; 0: no bound).
func WithAttemptTimeout(d time.Duration) Option { return func(c *Client) { c.attempt = d } }

// WithMaxResponseBytes bounds the body of an answer over HTTP (default 64
// MiB, far above any the store gives); a larger one fails the call with
// ErrResponseTooLarge rather than filling this process's memory. An
// answer on a stream is bounded by the stream's frames.
func WithMaxResponseBytes(n int64) Option { return func(c *Client) { c.maxBody = n } }

// Client talks to the members of one store. It is safe for concurrent
// use.
type Client struct {
	members                []*member
	hc                     *http.Client
	token                  string
	streams                bool
	minBackoff, maxBackoff time.Duration
	attempt                time.Duration
	maxBody                int64
	// id and seq make request ids: id is random, seq counts writes.
	id  string
	seq atomic.Uint64
	// cur is the member tried first: the last one that answered.
	cur atomic.Uint64
}

// New returns a client of the members at urls (base URLs such as
// "http://127.0.0.1:7101"). It tries them in order, starting with the
// first.
func New(urls []string, opts ...Option) *Client {
	var id [16]byte
	crand.Read(id[:])
	c := &Client{
		hc: http.DefaultClient, minBackoff: 5 * time.Millisecond, maxBackoff: 200 * time.Millisecond,
		attempt: 5 * time.Second, maxBody: 64 << 20, id: hex.EncodeToString(id[:]),
	}
	for _, u := range urls {
		c.members = append(c.members, &member{url: strings.TrimRight(u, "/")})
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Put stores value under key and returns the index it was applied at.
func (c *Client) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	r, err := c.do(ctx, request{op: wire.OpPut, key: key, value: value, id: c.nextID()})
	return r.index, err
}

// Get returns key's value and the index the read reflects. The read is
// linearizable: it sees every write acknowledged before it began.
func (c *Client) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	return c.get(ctx, key, false)
}

// GetStale returns key's value from the first member that answers, from
// its local state at once: possibly behind the latest writes (the index
// says how far it reflects).
func (c *Client) GetStale(ctx context.Context, key string) ([]byte, uint64, error) {
	return c.get(ctx, key, true)
}

func (c *Client) get(ctx context.Context, key string, stale bool) ([]byte, uint64, error) {
	if err := checkKey(key); err != nil {
		return nil, 0, err
	}
	op := wire.OpGet
	if stale {
		op = wire.OpGetStale
	}
	r, err := c.do(ctx, request{op: op, key: key})
	return r.body, r.index, err
}

// Delete removes key and returns the index it was applied at; it returns
// ErrNotFound (with that index) if key did not exist.
func (c *Client) Delete(ctx context.Context, key string) (uint64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	r, err := c.do(ctx, request{op: wire.OpDelete, key: key, id: c.nextID()})
	return r.index, err
}

// CAS sets key to new if its value is *old (old nil: if key does not
// exist). It returns whether it did and the index it was applied at.
// Both values must be valid UTF-8.
func (c *Client) CAS(ctx context.Context, key string, old *[]byte, new []byte) (bool, uint64, error) {
	if err := checkKey(key); err != nil {
		return false, 0, err
	}
	if (old != nil && !utf8.Valid(*old)) || !utf8.Valid(new) {
		return false, 0, ErrInvalidValue
	}
	r, err := c.do(ctx, request{op: wire.OpCAS, key: key, value: new, old: old, id: c.nextID()})
	return r.ok, r.index, err
}

// Close closes the Client's streams (WithStreams); later calls fail with
// ErrClosed. A Client without streams holds nothing to close.
func (c *Client) Close() error {
	for _, m := range c.members {
		m.close()
	}
	return nil
}

// Status returns the status of the member at url (one of the members'
// base URLs, or any other), without retries.
func (c *Client) Status(ctx context.Context, url string) (Status, error) {
	if c.attempt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.attempt)
		defer cancel()
	}
	var s Status
	_, err := c.httpOnce(ctx, strings.TrimRight(url, "/"), httpRequest{method: http.MethodGet, path: "/status"}, &s)
	if failed := (*retryable)(nil); errors.As(err, &failed) {
		err = failed.err
	}
	return s, err
}

// checkKey rejects the keys the API cannot carry.
func checkKey(key string) error {
	switch {
	case key == "", key == ".", key == "..":
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(key), MaxKeyBytes)
	}
	return nil
}

// nextID returns a fresh request id.
func (c *Client) nextID() string {
	return c.id + "-" + strconv.FormatUint(c.seq.Add(1), 10)
}

// request is one API call.
type request struct {
	op    wire.Op
	key   string
	value []byte
	// old is a CAS's expected value (nil: the key's absence).
	old *[]byte
	// id is the write's request id ("" for reads).
	id string
	// issued is the write's issued time in Unix nanoseconds (0: none).
	issued int64
}

// response is what a member answered: the index, a read's value, and
// whether a CAS took effect.
type response struct {
	index uint64
	body  []byte
	ok    bool
}

// retryable marks a try whose failure another member (or a later try)
// may not share; after is the pause the member asked for (its
// Retry-After), if any.
type retryable struct {
	err   error
	after time.Duration
	// refused says the try certainly reached no group: a member at
	// capacity (or a proxy) refused it (503 or 429 with a Retry-After)
	// before reading it.
	refused bool
}

// refusal returns the retryable error of an answer with status code and
// a Retry-After of after.
func refusal(code int, msg string, after time.Duration) *retryable {
	refused := after > 0 && (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests)
	return &retryable{err: &Error{StatusCode: code, Message: msg}, after: after, refused: refused}
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// do sends req to the members, from the current one on, until one gives
// an answer no retry changes or ctx ends: after a failure another try
// may not share, it moves on to the next member and pauses, as the
// member asked (Retry-After) or else by exponential backoff, with jitter
// either way. A write's tries carry the issued time of the first that
// may have reached the group, until RequestLifetime has passed since.
func (c *Client) do(ctx context.Context, req request) (response, error) {
	if len(c.members) == 0 {
		return response{}, fmt.Errorf("%w: no member URLs", ErrUnavailable)
	}
	// Each try is a round of the Pacer's: the pause after it is the one
	// its member asked for, if any.
	p := retry.NewPacer(c.minBackoff, c.maxBackoff)
	// last is the last member's answer, for the error once ctx ends: a try
	// that the context's end cut short says nothing new.
	var last error
	// issuedAt is the time of the first try that may have reached the
	// group (zero: none yet); req.issued is the same, once set.
	var issuedAt time.Time
	for {
		i := c.cur.Load()
		try, at := req, issuedAt
		if try.id != "" && at.IsZero() {
			at = time.Now()
			try.issued = at.UnixNano()
		}
		r, err := c.once(ctx, c.members[i%uint64(len(c.members))], try)
		var failed *retryable
		if !errors.As(err, &failed) {
			return r, err
		}
		if !failed.refused {
			req, issuedAt = try, at
		}
		if ctx.Err() == nil || last == nil {
			last = failed.err
		}
		if !issuedAt.IsZero() && time.Since(issuedAt) > RequestLifetime {
			return r, fmt.Errorf("%w: first sent %v ago (last: %v)", ErrExpired, time.Since(issuedAt).Round(time.Millisecond), last)
		}
		// Move on from this member (unless another call did already).
		c.cur.CompareAndSwap(i, i+1)
		p.Asked(failed.after)
		if ctx.Err() != nil || p.Wait(ctx) != nil {
			return r, fmt.Errorf("%w: %w (last: %v)", ErrUnavailable, ctx.Err(), last)
		}
	}
}

// once sends req to member m, over its stream with WithStreams. Failures
// that another try may not share are wrapped in *retryable.
func (c *Client) once(ctx context.Context, m *member, req request) (response, error) {
	if c.attempt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.attempt)
		defer cancel()
	}
	if c.streams {
		r, err := c.streamOnce(ctx, m, req)
		if !errors.Is(err, errNoStream) {
			return r, err
		}
	}
	hr := httpRequest{path: "/kv/" + url.PathEscape(req.key), id: req.id, issued: req.issued}
	var out struct {
		OK    bool   `json:"ok"`
		Index uint64 `json:"index"`
	}
	switch req.op {
	case wire.OpGet, wire.OpGetStale:
		hr.method, hr.raw = http.MethodGet, true
		if req.op == wire.OpGetStale {
			hr.path += "?stale=true"
		}
	case wire.OpPut:
		hr.method, hr.body = http.MethodPut, req.value
	case wire.OpDelete:
		hr.method = http.MethodDelete
	case wire.OpCAS:
		var body struct {
			Old *string `json:"old"`
			New string  `json:"new"`
		}
		if req.old != nil {
			s := string(*req.old)
			body.Old = &s
		}
		body.New = string(req.value)
		b, err := json.Marshal(body)
		if err != nil {
			return response{}, fmt.Errorf("client: %w", err)
		}
		hr.method, hr.path, hr.body, hr.json = http.MethodPost, hr.path+"/cas", b, true
	}
	var o any
	if !hr.raw {
		o = &out
	}
	r, err := c.httpOnce(ctx, m.url, hr, o)
	if !hr.raw && err == nil {
		r.index, r.ok = out.Index, out.OK
	}
	return r, err
}

// streamOnce sends req over m's stream. It returns errNoStream if m
// serves no streams.
func (c *Client) streamOnce(ctx context.Context, m *member, req request) (response, error) {
	s, err := c.stream(ctx, m)
	if err != nil {
		return response{}, err
	}
	wr := wire.Request{Op: req.op, Key: req.key, ID: req.id, Value: req.value, Issued: req.issued}
	if req.old != nil {
		wr.HasOld, wr.Old = true, *req.old
	}
	a, err := s.call(ctx, &wr)
	if err != nil {
		return response{}, err
	}
	r := response{index: a.Index, ok: a.OK}
	switch code := int(a.Status); {
	case code == http.StatusOK:
		r.body = a.Body
		return r, nil
	case code == http.StatusNotFound:
		return r, ErrNotFound
	case code == http.StatusServiceUnavailable, code == http.StatusTooManyRequests:
		return r, refusal(code, string(a.Body), a.RetryAfter)
	default:
		return r, &Error{StatusCode: code, Message: string(a.Body)}
	}
}

// httpRequest is one request of the HTTP API.
type httpRequest struct {
	method, path string
	body         []byte
	// id is the write's request id ("" for reads), issued its issued
	// time (0: none).
	id     string
	issued int64
	// json says the body is JSON; raw that a 200 answer's body is the
	// value (not JSON).
	json, raw bool
}

// httpOnce sends req to the member at base over HTTP; a 2xx answer's
// JSON body is decoded into out. Failures that another try may not share
// are wrapped in *retryable.
func (c *Client) httpOnce(ctx context.Context, base string, req httpRequest, out any) (response, error) {
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hreq, err := http.NewRequestWithContext(ctx, req.method, base+req.path, body)
	if err != nil {
		return response{}, fmt.Errorf("client: %w", err)
	}
	if req.id != "" {
		hreq.Header.Set("Idempotency-Key", req.id)
	}
	if req.issued != 0 {
		hreq.Header.Set("Request-Issued", strconv.FormatInt(req.issued, 10))
	}
	if req.json {
		hreq.Header.Set("Content-Type", "application/json")
	}
	c.authorize(hreq.Header)
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return response{}, &retryable{err: fmt.Errorf("client: %s %s: %w", req.method, base, err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return response{}, &retryable{err: fmt.Errorf("client: %s %s: reading the answer: %w", req.method, base, err)}
	}
	if int64(len(b)) > c.maxBody {
		return response{}, fmt.Errorf("client: %s %s: %w (above %d bytes)", req.method, base, ErrResponseTooLarge, c.maxBody)
	}
	var r response
	if h := resp.Header.Get("X-Convoy-Index"); h != "" {
		r.index, _ = strconv.ParseUint(h, 10, 64)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		if req.raw {
			r.body = b
			return r, nil
		}
		if out != nil {
			if err := json.Unmarshal(b, out); err != nil {
				return r, fmt.Errorf("client: %s %s: bad answer: %w", req.method, base, err)
			}
		}
		return r, nil
	case code == http.StatusNotFound && resp.Header.Get("X-Convoy-Index") != "":
		// A key's absence (other 404s, for unknown paths, carry no index).
		return r, ErrNotFound
	case code == http.StatusServiceUnavailable, code == http.StatusTooManyRequests, code == http.StatusBadGateway, code == http.StatusGatewayTimeout:
		return r, refusal(code, message(b), retry.After(resp.Header))
	default:
		return r, &Error{StatusCode: code, Message: message(b)}
	}
}

// authorize adds the bearer token, if any, to a request's header.
func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

// message returns an error body's "error" field, or the body.
func message(b []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return e.Error
	}
	return strings.TrimSpace(string(b))
}
