package paxos

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
)

// FuzzHTTP sends one request, read from raw bytes as the HTTP server
// reads it, to the API of a member whose group accepts and delivers
// every write at once. The member must answer every request it can read
// with a 2xx or a 4xx (never a 5xx, never a panic, never a hang), errors
// as a JSON object with an "error", and a write it acknowledges must
// read back: a PUT's body, a CAS's "new" (if it took effect), a DELETE's
// absence. An upgrade to a stream serves the bytes after the request as
// the stream's requests, and every answer it writes must decode.
func FuzzHTTP(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		in := bytes.NewReader(raw)
		br := bufio.NewReader(in)
		r, err := http.ReadRequest(br)
		if err != nil {
			return // the server answers 400 itself
		}
		n, _ := newTestNode(t, Options{MaxValueBytes: 64})
		// The stream must answer every request it reads before the
		// client's side ends: the connection holds its end until then.
		rest := raw[len(raw)-in.Len()-br.Buffered():]
		conn := &fuzzConn{in: br, want: streamRequests(rest, maxCommandBytes(n.opts.MaxValueBytes)+64)}
		conn.cond.L = &conn.mu
		body := &bytes.Buffer{}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.TeeReader(r.Body, body), r.Body}
		w := &hijackRecorder{ResponseRecorder: httptest.NewRecorder(), conn: conn}
		n.Handler().ServeHTTP(w, r)

		if w.hijacked {
			checkStreamOutput(t, w.conn.output())
			return
		}
		code, got := w.Code, w.Body.Bytes()
		if code >= 500 || code < 200 {
			t.Fatalf("%s %s: %d %s", r.Method, r.URL, code, got)
		}
		isRead := code == http.StatusOK && (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.URL.Path, "/kv/")
		if r.RequestURI == "*" {
			return // the router's 400, before any handler of the API
		}
		if code/100 == 3 {
			// The router's answer to a path that is not clean.
			if w.Header().Get("Location") == "" {
				t.Fatalf("%s %s: %d without Location", r.Method, r.URL, code)
			}
			return
		}
		if !isRead && r.Method != http.MethodHead {
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("%s %s: %d with Content-Type %q", r.Method, r.URL, code, ct)
			}
			var e errorResponse
			if err := json.Unmarshal(got, &e); err != nil {
				t.Fatalf("%s %s: %d %q is not JSON: %v", r.Method, r.URL, code, got, err)
			}
			if code >= 400 && e.Error == "" {
				t.Fatalf("%s %s: %d %q says no error", r.Method, r.URL, code, got)
			}
		}
		if code == http.StatusMethodNotAllowed && w.Header().Get("Allow") == "" {
			t.Fatalf("%s %s: 405 without Allow", r.Method, r.URL)
		}
		if code != http.StatusOK {
			return
		}
		// What a write acknowledged reads back.
		read := func() (int, []byte) {
			g := httptest.NewRequest(http.MethodGet, "/kv/"+url.PathEscape(r.PathValue("key"))+"?stale=true", nil)
			rw := httptest.NewRecorder()
			n.Handler().ServeHTTP(rw, g)
			return rw.Code, rw.Body.Bytes()
		}
		switch r.Method {
		case http.MethodPut:
			if c, v := read(); c != http.StatusOK || !bytes.Equal(v, body.Bytes()) {
				t.Fatalf("PUT %s of %q acknowledged, then GET: %d %q", r.URL, body, c, v)
			}
		case http.MethodDelete:
			if c, v := read(); c != http.StatusNotFound {
				t.Fatalf("DELETE %s acknowledged, then GET: %d %q", r.URL, c, v)
			}
		case http.MethodPost:
			var res casResponse
			var req casRequest
			if err := json.Unmarshal(got, &res); err != nil {
				t.Fatalf("POST %s: %q: %v", r.URL, got, err)
			}
			if err := json.Unmarshal(body.Bytes(), &req); err != nil || req.New == nil {
				t.Fatalf("POST %s: accepted %q, which does not decode: %v", r.URL, body, err)
			}
			if c, v := read(); res.OK && (c != http.StatusOK || string(v) != *req.New) {
				t.Fatalf("CAS %s to %q acknowledged, then GET: %d %q", r.URL, *req.New, c, v)
			}
		}
	})
}

// checkStreamOutput checks what a stream wrote: the upgrade's answer,
// then answers that decode.
func checkStreamOutput(t *testing.T, out []byte) {
	t.Helper()
	br := bufio.NewReader(bytes.NewReader(out))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("stream upgrade answered %q (%v)", out, err)
	}
	for {
		frame, _, err := wire.ReadFrame(br, 1<<20, nil)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("stream wrote a bad frame: %v (after the upgrade: %q)", err, out)
		}
		if _, err := wire.DecodeResponse(frame); err != nil {
			t.Fatalf("stream wrote an answer that does not decode: %v (%q)", err, frame)
		}
	}
}

// streamRequests counts the requests a stream answers in b: frames
// that hold at least a tag, up to the first that does not or that b
// holds only part of.
func streamRequests(b []byte, limit int) int {
	br := bufio.NewReader(bytes.NewReader(b))
	n := 0
	for {
		frame, size, err := wire.ReadFrame(br, limit, nil)
		if errors.Is(err, wire.ErrFrameTooLarge) {
			if _, err := br.Discard(size); err != nil {
				return n
			}
			n++
			continue
		}
		if err != nil {
			return n
		}
		if _, ok := wire.Tag(frame); !ok {
			return n
		}
		n++
	}
}

// streamAnswers counts the answers in what a stream wrote.
func streamAnswers(out []byte) int {
	_, frames, ok := bytes.Cut(out, []byte("\r\n\r\n"))
	if !ok {
		return 0
	}
	n := 0
	for len(frames) >= 4 {
		size := int(binary.BigEndian.Uint32(frames))
		if len(frames)-4 < size {
			break
		}
		frames = frames[4+size:]
		n++
	}
	return n
}

// hijackRecorder is a ResponseRecorder that the handler may take the
// connection from, as a stream does: the connection reads what follows
// the request and keeps what the handler writes.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	conn     *fuzzConn
	hijacked bool
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h.hijacked = true
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// fuzzConn is a connection whose peer sends in, then waits for want
// answers (or for the connection to close) and closes its side.
type fuzzConn struct {
	in   io.Reader
	want int

	mu sync.Mutex
	// cond is signalled when out grows or the connection closes.
	cond   sync.Cond
	out    bytes.Buffer
	closed bool
}

func (c *fuzzConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	n, err := c.in.Read(b)
	if err != io.EOF {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed && streamAnswers(c.out.Bytes()) < c.want {
		c.cond.Wait()
	}
	return n, io.EOF
}

func (c *fuzzConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	c.cond.Broadcast()
	return c.out.Write(b)
}

func (c *fuzzConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.cond.Broadcast()
	return nil
}

func (c *fuzzConn) output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

func (c *fuzzConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7101} }
func (c *fuzzConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
}
func (c *fuzzConn) SetDeadline(time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
