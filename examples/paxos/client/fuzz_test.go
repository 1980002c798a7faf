package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/wire"
)

// canned is a member that answers every request with the same bytes, as
// read off the connection: a response the client's transport must parse
// (or fail to). Its first answer ends the call's context, so that the
// client, which retries a 503 or a failure, returns.
type canned struct {
	raw    []byte
	cancel context.CancelFunc
}

func (c canned) RoundTrip(r *http.Request) (*http.Response, error) {
	c.cancel()
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(c.raw)), r)
}

// FuzzAnswer gives each of the client's calls over HTTP, as op says, an
// arbitrary answer from the member. Whatever the answer, the call must
// return (no panic, no hang); it may succeed only on a 200, and must
// then return what the answer says (a read's body, a write's index); and
// the statuses the API defines must give their errors.
func FuzzAnswer(f *testing.F) {
	f.Fuzz(func(t *testing.T, op uint8, raw []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := New([]string{"http://member:7101"}, WithHTTPClient(&http.Client{Transport: canned{raw, cancel}}),
			WithBackoff(time.Hour, time.Hour))
		defer c.Close()

		// What the answer says, read as the transport reads it (status
		// -1: it is no response).
		status, body, index := -1, []byte(nil), ""
		if resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil); err == nil {
			if b, err := io.ReadAll(resp.Body); err == nil {
				status, body, index = resp.StatusCode, b, resp.Header.Get("X-Convoy-Index")
			}
		}
		var out struct {
			OK    bool   `json:"ok"`
			Index uint64 `json:"index"`
		}
		jerr := json.Unmarshal(body, &out)
		headerIndex, _ := strconv.ParseUint(index, 10, 64)

		old := []byte("old")
		var err error
		var gotIndex uint64
		switch op % 6 {
		case 0:
			gotIndex, err = c.Put(ctx, "k", []byte("v"))
		case 1, 2:
			var v []byte
			if op%6 == 1 {
				v, gotIndex, err = c.Get(ctx, "k")
			} else {
				v, gotIndex, err = c.GetStale(ctx, "k")
			}
			if err == nil && (!bytes.Equal(v, body) || gotIndex != headerIndex) {
				t.Fatalf("read returned %q at %d; the answer: %q at %q", v, gotIndex, body, index)
			}
		case 3:
			gotIndex, err = c.Delete(ctx, "k")
		case 4:
			var ok bool
			ok, gotIndex, err = c.CAS(ctx, "k", &old, []byte("new"))
			if err == nil && ok != out.OK {
				t.Fatalf("CAS returned ok %v; the answer: %q", ok, body)
			}
		case 5:
			var s Status
			s, err = c.Status(ctx, "http://member:7101")
			var want Status
			if err == nil && (json.Unmarshal(body, &want) != nil || !reflect.DeepEqual(s, want)) {
				t.Fatalf("Status returned %+v; the answer: %q", s, body)
			}
		}
		if err != nil {
			checkAnswerError(t, op%6 == 5, status, body, index, err)
			return
		}
		if status != http.StatusOK {
			t.Fatalf("op %d succeeded on %d %q", op%6, status, body)
		}
		if op%6 == 0 || op%6 == 3 || op%6 == 4 {
			if jerr != nil || gotIndex != out.Index {
				t.Fatalf("write returned index %d; the answer: %q (%v)", gotIndex, body, jerr)
			}
		}
	})
}

// checkAnswerError checks the error a call (Status, if once) returned
// for an answer of status (0: not a response) with body and index.
func checkAnswerError(t *testing.T, once bool, status int, body []byte, index string, err error) {
	t.Helper()
	switch {
	case status/100 == 3:
		return // the HTTP client follows redirects
	case status == -1, status == http.StatusServiceUnavailable, status == http.StatusTooManyRequests,
		status == http.StatusBadGateway, status == http.StatusGatewayTimeout:
		if !once && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("answer %d %q: %v, want ErrUnavailable", status, body, err)
		}
		return
	case status == http.StatusNotFound && index != "":
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("answer %d %q: %v, want ErrNotFound", status, body, err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		if status == http.StatusOK {
			return // a body that does not decode
		}
		t.Fatalf("answer %d %q: %v, want an *Error", status, body, err)
	}
	if e.StatusCode != status || (status == http.StatusUnauthorized) != errors.Is(err, ErrUnauthorized) {
		t.Fatalf("answer %d %q: %v", status, body, err)
	}
}

// FuzzStreamAnswer gives a call over a stream (WithStreams), as op says,
// arbitrary bytes from the member: the answer to the upgrade, and once
// the call's request arrived, whatever follows it. Whatever they are,
// the call must return (no panic, no hang); if the member accepted the
// upgrade, the call must return what the first answer with the call's
// tag says, or fail if the stream breaks before it.
func FuzzStreamAnswer(f *testing.F) {
	f.Fuzz(func(t *testing.T, op uint8, raw []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// A member that accepts the upgrade gets one connection: the
		// client dials again only to retry, which ends the call. Else
		// the call ends once the member answered.
		_, upgrades := upgradeHead(raw)
		// net/http may still dial for its pool after the call that
		// asked for the connection gave up, so a dial can come while
		// this function returns: over is set, under mu, before the
		// wait for the served connections, and no dial serves one
		// after it.
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			over  bool
			dials int
		)
		defer func() {
			mu.Lock()
			over = true
			mu.Unlock()
			wg.Wait()
		}()
		tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			if over {
				return nil, errors.New("the call is over")
			}
			if dials++; upgrades && dials > 1 {
				cancel()
				return nil, errors.New("no more connections")
			}
			conn, member := net.Pipe()
			wg.Go(func() {
				serveCanned(member, raw)
				if !upgrades {
					cancel()
				}
			})
			return conn, nil
		}}
		defer tr.CloseIdleConnections()
		c := New([]string{"http://member:7101"}, WithHTTPClient(&http.Client{Transport: tr}), WithStreams(),
			WithBackoff(time.Millisecond, time.Millisecond))
		defer c.Close()

		old := []byte("old")
		var err error
		var r response
		switch op % 5 {
		case 0:
			r.index, err = c.Put(ctx, "k", []byte("v"))
		case 1:
			r.body, r.index, err = c.Get(ctx, "k")
		case 2:
			r.body, r.index, err = c.GetStale(ctx, "k")
		case 3:
			r.index, err = c.Delete(ctx, "k")
		case 4:
			r.ok, r.index, err = c.CAS(ctx, "k", &old, []byte("new"))
		}
		want, upgraded, answered := streamAnswer(raw)
		if !upgraded {
			return // HTTP: FuzzAnswer's
		}
		switch {
		case !answered:
			if err == nil {
				t.Fatalf("op %d succeeded with %+v, but the stream broke before the answer", op%5, r)
			}
		case want.Status == http.StatusOK:
			if err != nil || r.index != want.Index || (op%5 == 1 || op%5 == 2) && !bytes.Equal(r.body, want.Body) || op%5 == 4 && r.ok != want.OK {
				t.Fatalf("op %d returned %+v, %v; the answer: %+v", op%5, r, err, want)
			}
		case want.Status == http.StatusNotFound:
			if !errors.Is(err, ErrNotFound) || r.index != want.Index {
				t.Fatalf("op %d returned %+v, %v; the answer: %+v", op%5, r, err, want)
			}
		case want.Status == http.StatusServiceUnavailable, want.Status == http.StatusTooManyRequests:
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("op %d returned %v; the answer: %+v", op%5, err, want)
			}
		default:
			var e *Error
			if !errors.As(err, &e) || e.StatusCode != int(want.Status) || e.Message != string(want.Body) {
				t.Fatalf("op %d returned %v; the answer: %+v", op%5, err, want)
			}
		}
	})
}

// upgradeHead returns how many bytes of raw the answer to an upgrade
// takes, and whether it accepts the upgrade, as the client reads it.
func upgradeHead(raw []byte) (n int, upgraded bool) {
	in := bytes.NewReader(raw)
	br := bufio.NewReader(in)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return len(raw), false
	}
	return len(raw) - in.Len() - br.Buffered(), resp.StatusCode == http.StatusSwitchingProtocols && resp.Header.Get("Upgrade") == wire.Protocol
}

// streamAnswer returns the answer the client takes from raw, if raw
// accepts the upgrade: the first answer with the first call's tag (1)
// before the first frame that breaks the stream.
func streamAnswer(raw []byte) (a wire.Response, upgraded, answered bool) {
	n, upgraded := upgradeHead(raw)
	if !upgraded {
		return a, false, false
	}
	br := bufio.NewReader(bytes.NewReader(raw[n:]))
	for {
		frame, _, err := wire.ReadFrame(br, streamMaxAnswerBytes, nil)
		if err != nil {
			return a, true, false
		}
		if a, err = wire.DecodeResponse(frame); err != nil {
			return a, true, false
		}
		if a.Tag == 1 {
			return a, true, true
		}
	}
}

// serveCanned is a member on conn that answers the request it reads
// with raw; if raw accepts an upgrade to a stream, it sends what follows
// the upgrade's answer only once the stream's first request arrived.
// It closes conn once it wrote raw.
func serveCanned(conn net.Conn, raw []byte) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return
	}
	n, upgraded := upgradeHead(raw)
	if !upgraded {
		_, _ = conn.Write(raw)
		return
	}
	if _, err := conn.Write(raw[:n]); err != nil {
		return
	}
	if _, _, err := wire.ReadFrame(br, 1<<20, nil); err != nil {
		return
	}
	go func() { _, _ = io.Copy(io.Discard, br) }() // what else the client sends
	_, _ = conn.Write(raw[n:])
}
