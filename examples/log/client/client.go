// Package client is a Go client of the shared log's HTTP API (package
// sharedlog).
//
// A Client knows every member's base URL. It sends a request to one
// member and, when that member cannot serve (503) or cannot be reached,
// to the next at once; after a round of members that all failed it
// pauses, by exponential backoff with jitter, and goes round again,
// until the request's context ends. A member at capacity refuses a
// request at once with 503 (or a proxy with 429) and says how long to
// wait (Retry-After): after a round in which a member said so, the
// Client waits the shortest such time and up to half as long again at
// random, so that the clients refused together do not all come back
// together. Each write carries a request id (the Idempotency-Key header:
// a random 128-bit client id and a counter) that stays the same across
// those retries, so a retried append lands once.
//
//	c := client.New([]string{"http://127.0.0.1:7101", "http://127.0.0.1:7102"})
//	pos, err := c.Append(ctx, []byte("hello"), "greetings")
//	data, err := c.Read(ctx, pos)
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

	"github.com/convoy-gcs/convoy/internal/retry"
)

// Errors returned by the Client's methods.
var (
	// ErrUnwritten: the position is at or beyond the tail (HTTP 404).
	ErrUnwritten = errors.New("client: unwritten")
	// ErrTrimmed: the position is below the trim point (HTTP 410).
	ErrTrimmed = errors.New("client: trimmed")
	// ErrBadRequest: the server refused the request as malformed (HTTP
	// 400); the error says why.
	ErrBadRequest = errors.New("client: bad request")
	// ErrTooLarge: the entry is above the server's limit (HTTP 413).
	ErrTooLarge = errors.New("client: entry too large")
	// ErrUnavailable: no member served the request before the context
	// ended (every one answered 503 or could not be reached). Errors
	// wrapping it wrap the context's error and the last failure too. A
	// write may or may not have taken effect.
	ErrUnavailable = errors.New("client: no member available")
	// ErrUnauthorized: the member wants a bearer token (WithToken), and
	// the Client sent none or another (HTTP 401).
	ErrUnauthorized = errors.New("client: unauthorized")
)

// Entry is one entry of the log.
type Entry struct {
	Position uint64 `json:"position"`
	Data     []byte `json:"data"`
}

// Status is a member's GET /status.
type Status struct {
	ID      uint64   `json:"id"`
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	// Serving says whether the member takes part in a view.
	Serving bool `json:"serving"`
	// Applied is the last delivery index the member applied; Trim and
	// Tail bound the positions it holds.
	Applied uint64 `json:"applied"`
	Trim    uint64 `json:"trim"`
	Tail    uint64 `json:"tail"`
}

// Client talks to the members of one shared log. Its methods are safe
// for concurrent use.
type Client struct {
	urls    []string
	hc      *http.Client
	token   string
	backoff time.Duration
	maxBody int64
	// id is this client's random 128-bit id, seq counts its writes: a
	// request id is both.
	id   string
	seq  atomic.Uint64
	next atomic.Uint64 // the member to try first
}

// Option changes a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (default
// http.DefaultClient). For members that serve over TLS (https URLs),
// give hc a Transport that trusts their certificates.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken makes the Client send token as a bearer token (the header
// "Authorization: Bearer <token>") with every request, for members that
// require one. Send it over TLS only.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithBackoff sets the pause after a round of members that all failed
// (default 20ms; it doubles on each round, up to a second, each pause
// up to half shorter or longer at random). A member's Retry-After
// overrides it.
func WithBackoff(d time.Duration) Option { return func(c *Client) { c.backoff = d } }

// WithMaxResponseBytes bounds a response body (default 64 MiB).
func WithMaxResponseBytes(n int64) Option { return func(c *Client) { c.maxBody = n } }

// New returns a client of the members at urls (base URLs such as
// "http://127.0.0.1:7101").
func New(urls []string, opts ...Option) *Client {
	var id [16]byte
	_, _ = crand.Read(id[:]) // never fails (crypto/rand)
	c := &Client{hc: http.DefaultClient, backoff: 20 * time.Millisecond, maxBody: 64 << 20, id: hex.EncodeToString(id[:])}
	for _, u := range urls {
		c.urls = append(c.urls, strings.TrimRight(u, "/"))
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// newRequestID returns a request id for a new write.
func (c *Client) newRequestID() string {
	return c.id + "-" + strconv.FormatUint(c.seq.Add(1), 10)
}

// Append appends data to the log, and to the given streams, and returns
// its position. Retries carry the same request id, so the entry lands
// once.
func (c *Client) Append(ctx context.Context, data []byte, streams ...string) (uint64, error) {
	path := "/log"
	if len(streams) > 0 {
		path += "?streams=" + url.QueryEscape(strings.Join(streams, ","))
	}
	var out struct {
		Position uint64 `json:"position"`
	}
	if err := c.do(ctx, http.MethodPost, path, data, c.newRequestID(), &out); err != nil {
		return 0, err
	}
	return out.Position, nil
}

// Read returns the entry at pos, or ErrUnwritten, or ErrTrimmed.
func (c *Client) Read(ctx context.Context, pos uint64) ([]byte, error) {
	var data []byte
	if err := c.do(ctx, http.MethodGet, "/log/"+strconv.FormatUint(pos, 10), nil, "", &data); err != nil {
		return nil, err
	}
	return data, nil
}

// ReadRange returns the entries written and not trimmed in [from, to),
// in order. One call returns at most what one response holds (1000
// entries or 4 MiB by default): continue from the last position + 1.
func (c *Client) ReadRange(ctx context.Context, from, to uint64) ([]Entry, error) {
	var out []Entry
	path := fmt.Sprintf("/log?from=%d&to=%d", from, to)
	if err := c.do(ctx, http.MethodGet, path, nil, "", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Tail returns the next position to be written.
func (c *Client) Tail(ctx context.Context) (uint64, error) {
	var out struct {
		Tail uint64 `json:"tail"`
	}
	if err := c.do(ctx, http.MethodGet, "/log/tail", nil, "", &out); err != nil {
		return 0, err
	}
	return out.Tail, nil
}

// Trim drops the entries before position before (at most up to the
// tail) on every member, and returns the log's trim point once the trim
// applied: before; the tail, if before was beyond it; or the trim point
// an earlier trim reached, if that was further.
func (c *Client) Trim(ctx context.Context, before uint64) (uint64, error) {
	path := "/log/trim?before=" + strconv.FormatUint(before, 10)
	var out struct {
		Trim uint64 `json:"trim"`
	}
	if err := c.do(ctx, http.MethodPost, path, nil, c.newRequestID(), &out); err != nil {
		return 0, err
	}
	return out.Trim, nil
}

// ReadStream returns the entries of stream name at positions ≥ from, in
// order, at most what one response holds: continue from the last
// position + 1.
func (c *Client) ReadStream(ctx context.Context, name string, from uint64) ([]Entry, error) {
	var out []Entry
	path := "/streams/" + url.PathEscape(name) + "?from=" + strconv.FormatUint(from, 10)
	if err := c.do(ctx, http.MethodGet, path, nil, "", &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Status returns the status of the member at base URL u (no failover).
func (c *Client) Status(ctx context.Context, u string) (Status, error) {
	var out Status
	_, _, err := c.once(ctx, strings.TrimRight(u, "/"), http.MethodGet, "/status", nil, "", &out)
	return out, err
}

// do sends a request to the members in turn until one answers it or ctx
// ends, in rounds: each member once, from the one that answered last;
// after a round in which none did, it pauses as a member asked
// (Retry-After: the shortest asked in the round) or else by exponential
// backoff, with jitter either way (retry.Pacer). out receives the JSON
// body (or, if a *[]byte, the raw body).
func (c *Client) do(ctx context.Context, method, path string, body []byte, key string, out any) error {
	if len(c.urls) == 0 {
		return fmt.Errorf("%w: no member URLs", ErrUnavailable)
	}
	p := retry.NewPacer(c.backoff, retry.MaxBackoff)
	// last is the last member's failure, for the error once ctx ends: a
	// try that the context's end cut short says nothing new.
	var last error
	for {
		start := c.next.Load()
		for k := range uint64(len(c.urls)) {
			i := (start + k) % uint64(len(c.urls))
			again, after, err := c.once(ctx, c.urls[i], method, path, body, key, out)
			if !again {
				if err == nil {
					c.next.Store(i)
				}
				return err
			}
			if ctx.Err() == nil || last == nil {
				last = err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: %w (last: %w)", ErrUnavailable, ctx.Err(), last)
			}
			p.Asked(after)
		}
		if err := p.Wait(ctx); err != nil {
			return fmt.Errorf("%w: %w (last: %w)", ErrUnavailable, err, last)
		}
	}
}

// once sends one request to the member at base. It reports whether
// another member should be tried (503 or 429, or no answer), and how
// long the member asked to wait first (Retry-After; 0 if it did not).
func (c *Client) once(ctx context.Context, base, method, path string, body []byte, key string, out any) (again bool, after time.Duration, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return false, 0, fmt.Errorf("client: %w", err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return true, 0, fmt.Errorf("client: %s %s: %w", method, base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return true, 0, fmt.Errorf("client: %s %s: reading the response: %w", method, base, err)
	}
	if int64(len(data)) > c.maxBody {
		return false, 0, fmt.Errorf("client: %s %s: response above %d bytes", method, base, c.maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		switch resp.StatusCode {
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			return true, retry.After(resp.Header), statusError(resp.StatusCode, data)
		}
		return false, 0, statusError(resp.StatusCode, data)
	}
	switch o := out.(type) {
	case nil:
	case *[]byte:
		*o = data
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return false, 0, fmt.Errorf("client: %s %s: bad response: %w", method, base, err)
		}
	}
	return false, 0, nil
}

// statusError turns an error response into an error.
func statusError(status int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	switch {
	case status == http.StatusNotFound && msg == "unwritten":
		return ErrUnwritten
	case status == http.StatusGone && msg == "trimmed":
		return ErrTrimmed
	case status == http.StatusBadRequest:
		return fmt.Errorf("%w: %s", ErrBadRequest, msg)
	case status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%w: %s", ErrTooLarge, msg)
	case status == http.StatusUnauthorized:
		return fmt.Errorf("%w: %s", ErrUnauthorized, msg)
	}
	return fmt.Errorf("client: HTTP %d: %s", status, msg)
}
