package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
	"github.com/convoy-gcs/convoy/internal/retry"
)

// streamMaxAnswerBytes bounds an answer frame: a value of the largest
// size a member may store (its MaxValueBytes, 1 MiB by default) with
// room to spare.
const streamMaxAnswerBytes = 64 << 20

// errNoStream says a member does not serve streams: the client uses its
// HTTP API instead.
var errNoStream = errors.New("client: the member serves no streams")

// member is one member's URL and, with WithStreams, its stream.
type member struct {
	url string

	mu struct {
		sync.Mutex
		// s is the open stream, if any; noStream says the member refused
		// the upgrade (an older server): requests use HTTP.
		s        *streamConn
		noStream bool
		closed   bool
	}
}

// stream returns the member's open stream, dialing one if needed.
func (c *Client) stream(ctx context.Context, m *member) (*streamConn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.mu.closed:
		return nil, ErrClosed
	case m.mu.noStream:
		return nil, errNoStream
	case m.mu.s != nil && !m.mu.s.broken():
		return m.mu.s, nil
	}
	// Dialing under the lock makes concurrent callers wait for one dial
	// instead of each opening a connection.
	s, err := c.dialStream(ctx, m.url)
	if errors.Is(err, errNoStream) {
		m.mu.noStream = true
	}
	if err != nil {
		return nil, err
	}
	m.mu.s = s
	return s, nil
}

// closeStream closes the member's stream and makes later calls fail.
func (m *member) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.closed = true
	if m.mu.s != nil {
		m.mu.s.close(ErrClosed)
	}
}

// dialStream connects to the member at base and upgrades the connection
// to a stream. It dials with the HTTP client's *http.Transport settings
// (DialContext, TLSClientConfig) if it has them.
func (c *Client) dialStream(ctx context.Context, base string) (*streamConn, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	var tlsConfig *tls.Config
	if t, ok := c.hc.Transport.(*http.Transport); ok {
		// Clone, not the fields: the transport sets its TLS config up
		// lazily, on its first request, which may be under way on another
		// goroutine; Clone waits for that.
		t = t.Clone()
		dial, tlsConfig = t.DialContext, t.TLSClientConfig
	}
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	host := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	conn, err := dial(ctx, "tcp", host)
	if err != nil {
		return nil, &retryable{err: fmt.Errorf("client: stream to %s: %w", base, err)}
	}
	if u.Scheme == "https" {
		cfg := &tls.Config{}
		if tlsConfig != nil {
			cfg = tlsConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = u.Hostname()
		}
		// The upgrade is an HTTP/1.1 request: ALPN must not pick h2.
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, &retryable{err: fmt.Errorf("client: stream to %s: %w", base, err)}
		}
		conn = tc
	}
	br, err := c.upgrade(ctx, conn, base)
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &streamConn{conn: conn, pending: make(map[uint64]chan wire.Response), wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.read(br)
	go s.write()
	return s, nil
}

// upgrade asks the member to turn conn into a stream, within ctx.
func (c *Client) upgrade(ctx context.Context, conn net.Conn, base string) (*bufio.Reader, error) {
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+wire.StreamPath, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", wire.Protocol)
	c.authorize(req.Header)
	if err := req.Write(conn); err != nil {
		return nil, &retryable{err: fmt.Errorf("client: stream to %s: %w", base, err)}
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, &retryable{err: fmt.Errorf("client: stream to %s: %w", base, err)}
	}
	if resp.StatusCode == http.StatusSwitchingProtocols && resp.Header.Get("Upgrade") == wire.Protocol {
		return br, nil
	}
	body := make([]byte, 512)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUpgradeRequired, http.StatusNotImplemented:
		return nil, errNoStream
	case http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusBadGateway, http.StatusGatewayTimeout:
		return nil, refusal(resp.StatusCode, message(body[:n]), retry.After(resp.Header))
	}
	return nil, &Error{StatusCode: resp.StatusCode, Message: message(body[:n])}
}

// streamConn is a client's stream to one member: callers queue request
// frames, a writer sends whatever is queued in one write, and a reader
// hands each answer to the caller waiting for its tag.
type streamConn struct {
	conn net.Conn
	wake chan struct{}
	// answers counts the answers read.
	answers atomic.Uint64
	// done is closed once the stream broke or was closed (err says why).
	done chan struct{}

	mu      sync.Mutex
	pending map[uint64]chan wire.Response
	tag     uint64
	buf     []byte
	err     error
}

func (s *streamConn) broken() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// call sends req and waits for its answer. A broken stream's error is
// retryable: another member, or a new stream, may serve the request.
func (s *streamConn) call(ctx context.Context, req *wire.Request) (wire.Response, error) {
	ch := make(chan wire.Response, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return wire.Response{}, err
	}
	s.tag++
	req.Tag = s.tag
	s.pending[req.Tag] = ch
	s.buf = wire.AppendRequest(s.buf, req)
	s.mu.Unlock()
	answered := s.answers.Load()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return s.await(ctx, req.Tag, ch, answered)
}

// await waits for the answer to the call with tag on ch; answered is how
// many answers the stream had read when the call was queued.
func (s *streamConn) await(ctx context.Context, tag uint64, ch <-chan wire.Response, answered uint64) (wire.Response, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-s.done:
		// The reader hands an answer over before it reads on, so one
		// that came before the stream broke is in ch by now.
		select {
		case r := <-ch:
			return r, nil
		default:
		}
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		return wire.Response{}, err
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, tag)
		s.mu.Unlock()
		select {
		case r := <-ch: // answered meanwhile
			return r, nil
		default:
		}
		if s.answers.Load() == answered {
			// Nothing came back on the stream while this call waited: the
			// member (or the path to it) is stuck. Closing the stream
			// ends the requests it holds there, and the next call dials
			// again.
			s.close(&retryable{err: errors.New("client: stream answered nothing")})
		}
		return wire.Response{}, &retryable{err: ctx.Err()}
	}
}

// close ends the stream with err, failing every call waiting.
func (s *streamConn) close(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
	s.mu.Unlock()
	s.conn.Close()
}

// read hands answers to their callers until the stream fails.
func (s *streamConn) read(br *bufio.Reader) {
	for {
		frame, _, err := wire.ReadFrame(br, streamMaxAnswerBytes, nil)
		var r wire.Response
		if err == nil {
			r, err = wire.DecodeResponse(frame)
		}
		if err != nil {
			s.close(&retryable{err: fmt.Errorf("client: stream broke: %w", err)})
			return
		}
		s.answers.Add(1)
		s.mu.Lock()
		ch := s.pending[r.Tag]
		delete(s.pending, r.Tag)
		s.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// write sends the queued requests, all that are queued at once, until
// the stream ends.
func (s *streamConn) write() {
	var spare []byte
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		s.mu.Lock()
		if len(s.pending) > 1 {
			// Other calls are in flight: yield once before taking the
			// queue, so that the callers the scheduler holds ready
			// (those the reader just handed answers, say) queue their
			// requests meanwhile, and one write carries them all.
			s.mu.Unlock()
			runtime.Gosched()
			s.mu.Lock()
		}
		// spare becomes the callers' buffer: it must not be reused
		// while they append to it.
		out := s.buf
		s.buf, spare = spare[:0], nil
		s.mu.Unlock()
		if len(out) == 0 {
			continue
		}
		if _, err := s.conn.Write(out); err != nil {
			s.close(&retryable{err: fmt.Errorf("client: stream broke: %w", err)})
			return
		}
		if cap(out) <= 1<<20 {
			spare = out
		}
	}
}
