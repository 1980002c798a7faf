// Package client is a Go client of the pub/sub service's HTTP API
// (package pubsub).
//
// A Client knows every member's base URL. A publish goes to one member
// and, when that member cannot serve (503) or cannot be reached, to the
// next at once; after a round of members that all failed it pauses, by
// exponential backoff with jitter, and goes round again, until the
// request's context ends. A member at capacity refuses a request at once
// with 503 (or a proxy with 429) and says how long to wait
// (Retry-After): after a round in which a member said so, the Client
// waits the shortest such time and up to half as long again at random,
// so that the clients refused together do not all come back together.
// A subscription, which names its member, is retried there the same way;
// so is the opening of an event stream, round the members. An event
// stream (Events) reads a topic's messages from one subscribing member
// and, when the connection breaks or the member goes away, resumes at the
// next subscribing member from the message after the last it returned:
// every subscriber numbers a topic's messages alike.
//
//	c := client.New([]string{"http://127.0.0.1:7101", "http://127.0.0.1:7102"})
//	if err := c.Subscribe(ctx, "http://127.0.0.1:7101", "orders", "atomic"); err != nil { ... }
//	r, err := c.Publish(ctx, "orders", []byte("42 apples"))
//	s := c.Events(ctx, "orders", 1)
//	defer s.Close()
//	for {
//		ev, err := s.Next()
//		...
//	}
package client

import (
	"bufio"
	"bytes"
	"context"
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
	// ErrUnknownTopic: the group has no such topic (HTTP 404).
	ErrUnknownTopic = errors.New("client: unknown topic")
	// ErrTrimmed: the cursor is below the prefix of the topic that every
	// member tried keeps (HTTP 410).
	ErrTrimmed = errors.New("client: below the kept prefix")
	// ErrNotSubscribed: no member tried subscribes to the topic (HTTP 409
	// from each).
	ErrNotSubscribed = errors.New("client: no member subscribes to the topic")
	// ErrBadRequest: the server refused the request as malformed (HTTP
	// 400); the error says why.
	ErrBadRequest = errors.New("client: bad request")
	// ErrTooLarge: the message is above the server's limit (HTTP 413).
	ErrTooLarge = errors.New("client: message too large")
	// ErrUnavailable: no member served the request before the context
	// ended (every one answered 503 or could not be reached). A publish
	// may or may not have taken effect.
	ErrUnavailable = errors.New("client: no member available")
	// ErrUnauthorized: the member wants a bearer token (WithToken), and
	// the Client sent none or another (HTTP 401).
	ErrUnauthorized = errors.New("client: unauthorized")
)

// Receipt is what a publish returns: the message's number among the
// serving member's messages on the topic.
type Receipt struct {
	Topic string `json:"topic"`
	Seq   uint64 `json:"seq"`
}

// Event is one message of a topic.
type Event struct {
	Index  uint64 `json:"index"`
	Epoch  uint64 `json:"epoch"`
	Sender uint64 `json:"sender"`
	Seq    uint64 `json:"seq"`
	Data   []byte `json:"data"`
}

// TopicInfo describes a topic, as a member sees it (GET /topics).
type TopicInfo struct {
	Name        string   `json:"name"`
	Mode        string   `json:"mode"`
	Subscribers []uint64 `json:"subscribers"`
	Subscribed  bool     `json:"subscribed"`
	First       uint64   `json:"first,omitempty"`
	Last        uint64   `json:"last,omitempty"`
}

// Client talks to the members of one pub/sub service. Its methods are
// safe for concurrent use.
type Client struct {
	urls     []string
	hc       *http.Client
	token    string
	backoff  time.Duration
	maxEvent int
	next     atomic.Uint64 // the member to try first
}

// Option changes a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (default
// http.DefaultClient).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken makes the Client send token as a bearer token with every
// request, for members that require one. Send it over TLS only.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithBackoff sets the pause after a round of members that all failed
// (default 20ms; it doubles on each round, up to a second, each pause
// up to half shorter or longer at random). A member's Retry-After
// overrides it.
func WithBackoff(d time.Duration) Option { return func(c *Client) { c.backoff = d } }

// WithMaxEventBytes bounds one event of a stream (default 4 MiB).
func WithMaxEventBytes(n int) Option { return func(c *Client) { c.maxEvent = n } }

// New returns a client of the members at urls (base URLs such as
// "http://127.0.0.1:7101").
func New(urls []string, opts ...Option) *Client {
	c := &Client{hc: http.DefaultClient, backoff: 20 * time.Millisecond, maxEvent: 4 << 20}
	for _, u := range urls {
		c.urls = append(c.urls, strings.TrimRight(u, "/"))
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Publish publishes data on topic, at any member, and returns once every
// subscriber holds it.
func (c *Client) Publish(ctx context.Context, topic string, data []byte) (Receipt, error) {
	var r Receipt
	err := c.anyMember(ctx, func(base string) (*http.Response, error) {
		return c.send(ctx, http.MethodPost, base+"/topics/"+url.PathEscape(topic), data)
	}, &r)
	return r, err
}

// Subscribe makes the member at base (one of the Client's URLs, or any)
// a subscriber of topic, creating the topic in mode ("atomic" or
// "total"; "" for atomic) if the group lacks it; it returns once the
// subscription is in effect.
func (c *Client) Subscribe(ctx context.Context, base, topic, mode string) error {
	path := "/topics/" + url.PathEscape(topic) + "/subscribe"
	if mode != "" {
		path += "?mode=" + url.QueryEscape(mode)
	}
	return c.atMember(ctx, strings.TrimRight(base, "/")+path)
}

// Unsubscribe ends the subscription of the member at base to topic.
func (c *Client) Unsubscribe(ctx context.Context, base, topic string) error {
	return c.atMember(ctx, strings.TrimRight(base, "/")+"/topics/"+url.PathEscape(topic)+"/unsubscribe")
}

// Topics returns the group's topics, as a member sees them.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	var out []TopicInfo
	err := c.anyMember(ctx, func(base string) (*http.Response, error) {
		return c.send(ctx, http.MethodGet, base+"/topics", nil)
	}, &out)
	return out, err
}

// atMember posts to u, one member, again after a 503 until ctx ends,
// pausing as the member asks (Retry-After) or else by backoff.
func (c *Client) atMember(ctx context.Context, u string) error {
	p := retry.NewPacer(c.backoff, retry.MaxBackoff)
	for {
		resp, err := c.send(ctx, http.MethodPost, u, nil)
		var after time.Duration
		if err == nil {
			after = retryAfter(resp)
			err = decode(resp, nil)
		}
		if err == nil || !retryable(err) {
			return err
		}
		p.Asked(after)
		if err := wait(ctx, p, err); err != nil {
			return err
		}
	}
}

// anyMember runs try on the members in turn, from the last that served,
// until one serves or ctx ends, and decodes the answer into out. After a
// round in which none served, it pauses as a member asked (Retry-After:
// the shortest asked in the round) or else by exponential backoff, with
// jitter either way.
func (c *Client) anyMember(ctx context.Context, try func(base string) (*http.Response, error), out any) error {
	if len(c.urls) == 0 {
		return fmt.Errorf("%w: no members", ErrUnavailable)
	}
	p := retry.NewPacer(c.backoff, retry.MaxBackoff)
	start := c.next.Load()
	for {
		var last error
		for i := range uint64(len(c.urls)) {
			k := (start + i) % uint64(len(c.urls))
			resp, err := try(c.urls[k])
			if err == nil {
				p.Asked(retryAfter(resp))
				err = decode(resp, out)
			}
			if err == nil {
				c.next.Store(k)
				return nil
			}
			if !retryable(err) {
				return err
			}
			last = err
		}
		if err := wait(ctx, p, last); err != nil {
			return err
		}
	}
}

// wait ends a round of tries (retry.Pacer.Wait), or returns
// ErrUnavailable once ctx ends.
func wait(ctx context.Context, p *retry.Pacer, last error) error {
	if err := p.Wait(ctx); err != nil {
		return fmt.Errorf("%w: %w (last: %w)", ErrUnavailable, err, last)
	}
	return nil
}

// retryAfter returns the pause a member refusing a request for capacity
// (503 or 429) asked for (Retry-After), 0 for any other answer.
func retryAfter(resp *http.Response) time.Duration {
	switch resp.StatusCode {
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		return retry.After(resp.Header)
	}
	return 0
}

// retryable reports whether another try, here or elsewhere, may succeed.
func retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotSubscribed)
}

func (c *Client) send(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return resp, nil
}

// decode reads resp: its JSON into out on 200, the error it reports
// otherwise.
func decode(resp *http.Response, out any) error {
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			return nil
		}
		return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out)
	}
	return statusErr(resp)
}

// statusErr returns the error a non-200 answer stands for.
func statusErr(resp *http.Response) error {
	var e struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&e)
	var kind error
	switch resp.StatusCode {
	case http.StatusBadRequest:
		kind = ErrBadRequest
	case http.StatusUnauthorized:
		kind = ErrUnauthorized
	case http.StatusNotFound:
		kind = ErrUnknownTopic
	case http.StatusConflict:
		kind = ErrNotSubscribed
	case http.StatusGone:
		kind = ErrTrimmed
	case http.StatusRequestEntityTooLarge:
		kind = ErrTooLarge
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		kind = ErrUnavailable
	default:
		return fmt.Errorf("client: HTTP %d: %s", resp.StatusCode, e.Error)
	}
	return fmt.Errorf("%w: %s", kind, e.Error)
}

// Stream reads a topic's messages as server-sent events, resuming after
// a broken connection at the next subscribing member from the message
// after the last returned. It is not safe for concurrent use.
type Stream struct {
	c      *Client
	ctx    context.Context
	topic  string
	next   uint64 // the index to read from (0: new messages only)
	member uint64 // the member to try first
	body   io.ReadCloser
	r      *bufio.Reader
	closed bool
}

// Events returns a stream of topic's messages from index from on (0: the
// messages published from now on). Nothing is sent until Next.
func (c *Client) Events(ctx context.Context, topic string, from uint64) *Stream {
	return &Stream{c: c, ctx: ctx, topic: topic, next: from, member: c.next.Load()}
}

// Next returns the next message. It returns ErrUnknownTopic,
// ErrNotSubscribed (no member subscribes to the topic), ErrTrimmed (no
// subscribing member keeps the next index: resume from a later one),
// ErrUnavailable once the stream's context ends, or the errors of a
// refused request.
func (s *Stream) Next() (Event, error) {
	p := retry.NewPacer(s.c.backoff, retry.MaxBackoff)
	for !s.closed {
		if s.body == nil {
			if err := s.connect(p); err != nil {
				return Event{}, err
			}
		}
		ev, err := s.read()
		if err == nil {
			if s.next != 0 && ev.Index < s.next {
				continue // sent before (cannot happen: the cursor says where to start)
			}
			s.next = ev.Index + 1
			return ev, nil
		}
		// The connection broke, or the member went away: resume at the
		// next.
		s.drop()
		s.member++
		if s.ctx.Err() != nil {
			return Event{}, fmt.Errorf("%w: %w", ErrUnavailable, s.ctx.Err())
		}
	}
	return Event{}, errors.New("client: stream closed")
}

// Close ends the stream.
func (s *Stream) Close() error {
	s.closed = true
	s.drop()
	return nil
}

func (s *Stream) drop() {
	if s.body != nil {
		s.body.Close()
		s.body, s.r = nil, nil
	}
}

// connect opens the stream at a subscribing member, trying each in turn
// from s.member; after a round in which a member was unavailable, it
// pauses as p says (a member's Retry-After, or backoff).
func (s *Stream) connect(p *retry.Pacer) error {
	c := s.c
	if len(c.urls) == 0 {
		return fmt.Errorf("%w: no members", ErrUnavailable)
	}
	for {
		// last is the last failure; trimmed, if set, a member's 410:
		// when no member is merely unavailable, it stands.
		var last, trimmed error
		unavailable := false
		for range len(c.urls) {
			k := s.member % uint64(len(c.urls))
			u := c.urls[k] + "/topics/" + url.PathEscape(s.topic) + "/events"
			if s.next != 0 {
				u += "?from=" + strconv.FormatUint(s.next, 10)
			}
			resp, err := c.send(s.ctx, http.MethodGet, u, nil)
			if err == nil && resp.StatusCode == http.StatusOK {
				s.body, s.r = resp.Body, bufio.NewReader(resp.Body)
				return nil
			}
			if err == nil {
				p.Asked(retryAfter(resp))
				err = statusErr(resp)
				resp.Body.Close()
			}
			switch {
			case errors.Is(err, ErrTrimmed):
				trimmed = err
			case errors.Is(err, ErrUnavailable):
				unavailable = true
			case !errors.Is(err, ErrNotSubscribed):
				return err
			}
			last = err
			s.member++
		}
		switch {
		case unavailable:
		case trimmed != nil:
			return trimmed
		default:
			return last // no member subscribes to the topic
		}
		if err := wait(s.ctx, p, last); err != nil {
			return err
		}
	}
}

// read reads the next message event of the stream.
func (s *Stream) read() (Event, error) {
	var data []byte
	event := "message"
	for {
		line, err := s.line()
		if err != nil {
			return Event{}, err
		}
		switch {
		case len(line) == 0:
			if data == nil || event != "message" {
				data, event = nil, "message"
				continue
			}
			var ev Event
			if err := json.Unmarshal(data, &ev); err != nil {
				return Event{}, fmt.Errorf("client: malformed event: %w", err)
			}
			return ev, nil
		case line[0] == ':':
			// A comment: the server's keep-alive.
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
			if len(data) > s.c.maxEvent {
				return Event{}, fmt.Errorf("client: an event of more than %d bytes", s.c.maxEvent)
			}
		case bytes.HasPrefix(line, []byte("event:")):
			event = string(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("event:"))))
		}
	}
}

// line reads one line, without its end, of at most maxEvent bytes.
func (s *Stream) line() ([]byte, error) {
	var out []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		out = append(out, chunk...)
		if len(out) > s.c.maxEvent {
			return nil, fmt.Errorf("client: a line of more than %d bytes", s.c.maxEvent)
		}
		switch {
		case err == nil:
			return bytes.TrimRight(out, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}
