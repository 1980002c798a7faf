package paxos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/convoy-gcs/convoy/examples/paxos/client"
	"github.com/convoy-gcs/convoy/examples/paxos/wire"
)

// The stream protocol's bounds are the commands'.
func TestStreamBounds(t *testing.T) {
	if wire.MaxKeyBytes != MaxKeyBytes || wire.MaxIDBytes != MaxRequestIDBytes {
		t.Fatalf("wire bounds %d, %d; commands' %d, %d", wire.MaxKeyBytes, wire.MaxIDBytes, MaxKeyBytes, MaxRequestIDBytes)
	}
}

// localServer serves a store that NewLocal made over HTTP, with h
// wrapping its handler if not nil.
func localServer(t *testing.T, opts Options, wrap func(http.Handler) http.Handler) (*Node, *httptest.Server) {
	t.Helper()
	n, err := NewLocal(opts)
	if err != nil {
		t.Fatal(err)
	}
	h := n.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		n.Close()
		srv.Close()
	})
	return n, srv
}

func streamClient(t *testing.T, urls ...string) *client.Client {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{}}
	c := client.New(urls, client.WithHTTPClient(hc), client.WithStreams(), client.WithBackoff(time.Millisecond, 5*time.Millisecond))
	t.Cleanup(func() {
		c.Close()
		hc.CloseIdleConnections()
	})
	return c
}

func (n *Node) streamCount() int {
	n.streams.Lock()
	defer n.streams.Unlock()
	return len(n.streams.m)
}

// TestStream carries every operation over a stream and checks the
// answers are the HTTP API's.
func TestStream(t *testing.T) {
	n, srv := localServer(t, Options{MaxValueBytes: 64}, nil)
	c := streamClient(t, srv.URL)
	ctx := testContext(t)

	i1, err := c.Put(ctx, "a", []byte("1"))
	if err != nil || i1 != 1 {
		t.Fatalf("Put: index %d, %v; want 1", i1, err)
	}
	if got := n.streamCount(); got != 1 {
		t.Fatalf("the server serves %d streams, want 1", got)
	}
	if v, i, err := c.Get(ctx, "a"); err != nil || string(v) != "1" || i != i1 {
		t.Errorf("Get: %q at %d, %v; want \"1\" at %d", v, i, err, i1)
	}
	if v, _, err := c.GetStale(ctx, "a"); err != nil || string(v) != "1" {
		t.Errorf("GetStale: %q, %v", v, err)
	}
	if _, _, err := c.Get(ctx, "missing"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
	wrong := []byte("x")
	if ok, _, err := c.CAS(ctx, "a", &wrong, []byte("2")); err != nil || ok {
		t.Errorf("CAS from a wrong value: %v, %v; want false", ok, err)
	}
	old := []byte("1")
	if ok, i, err := c.CAS(ctx, "a", &old, []byte("2")); err != nil || !ok || i <= i1 {
		t.Errorf("CAS: %v at %d, %v; want true after %d", ok, i, err, i1)
	}
	if ok, _, err := c.CAS(ctx, "b", nil, []byte("new")); err != nil || !ok {
		t.Errorf("CAS of an absent key: %v, %v; want true", ok, err)
	}
	if _, err := c.Delete(ctx, "a"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := c.Delete(ctx, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Delete of a missing key: %v, want ErrNotFound", err)
	}
	var e *client.Error
	if _, err := c.Put(ctx, "a", make([]byte, 65)); !errors.As(err, &e) || e.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("Put above MaxValueBytes: %v, want 413", err)
	}
	if got := n.streamCount(); got != 1 {
		t.Errorf("the server serves %d streams after the calls, want still 1", got)
	}
}

// TestStreamConcurrent has many callers share one stream, each checking
// that it reads back what it wrote: answers must reach their callers
// whole and in any order.
func TestStreamConcurrent(t *testing.T) {
	_, srv := localServer(t, Options{}, nil)
	c := streamClient(t, srv.URL)
	ctx := testContext(t)
	const callers, ops = 32, 100
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ops {
				key := fmt.Sprintf("k%d-%d", g, i%7)
				value := bytes.Repeat([]byte{byte(g)}, 1+(g*ops+i)%300)
				if _, err := c.Put(ctx, key, value); err != nil {
					errs <- fmt.Errorf("Put %s: %w", key, err)
					return
				}
				got, _, err := c.Get(ctx, key)
				if err != nil || !bytes.Equal(got, value) {
					errs <- fmt.Errorf("Get %s: %d bytes, %v; want the %d bytes written", key, len(got), err, len(value))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestStreamFallback: a member that does not serve streams gets HTTP
// requests from a client with streams.
func TestStreamFallback(t *testing.T) {
	n, srv := localServer(t, Options{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == wire.StreamPath {
				http.NotFound(w, r)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	c := streamClient(t, srv.URL)
	ctx := testContext(t)
	for i := range 3 {
		if _, err := c.Put(ctx, "k", []byte{byte(i)}); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	if v, _, err := c.Get(ctx, "k"); err != nil || !bytes.Equal(v, []byte{2}) {
		t.Errorf("Get: %v, %v", v, err)
	}
	if got := n.streamCount(); got != 0 {
		t.Errorf("%d streams served", got)
	}
}

// TestStreamOlderVersion: a member that speaks only version 1 of the
// stream protocol, from before issued times, refuses the upgrade of a
// client of this version, as such a member did (426 naming its token),
// and the client's writes, issued times included, go over HTTP and
// succeed; the client asks for a stream once. A client of version 1
// gets the same answer from a member of this version.
func TestStreamOlderVersion(t *testing.T) {
	const older = "convoy-kv/1"
	var upgrades atomic.Int32
	n, srv := localServer(t, Options{}, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != wire.StreamPath {
				h.ServeHTTP(w, r)
				return
			}
			upgrades.Add(1)
			// What a version 1 member does with an upgrade.
			if headerHasToken(r.Header, "Upgrade", older) {
				t.Errorf("the client asks a member for %s", older)
			}
			w.Header().Set("Upgrade", older)
			w.Header().Set("Connection", "Upgrade")
			writeError(w, http.StatusUpgradeRequired, "this endpoint upgrades to "+older)
		})
	})
	c := streamClient(t, srv.URL)
	ctx := testContext(t)
	for i := range 3 {
		if _, err := c.Put(ctx, "k", []byte{byte(i)}); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	old := []byte{2}
	if ok, _, err := c.CAS(ctx, "k", &old, []byte("new")); err != nil || !ok {
		t.Fatalf("CAS: %v, %v", ok, err)
	}
	if v, _, err := c.Get(ctx, "k"); err != nil || string(v) != "new" {
		t.Errorf("Get: %q, %v", v, err)
	}
	if got := n.streamCount(); got != 0 {
		t.Errorf("%d streams served", got)
	}
	if got := upgrades.Load(); got != 1 {
		t.Errorf("%d upgrades asked for, want 1", got)
	}

	// A version 1 client at a member of this version.
	_, cur := localServer(t, Options{}, nil)
	req, err := http.NewRequest(http.MethodGet, cur.URL+wire.StreamPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", older)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != wire.Protocol {
		t.Errorf("upgrade to %s: %s, Upgrade %q; want 426 naming %s", older, resp.Status, resp.Header.Get("Upgrade"), wire.Protocol)
	}
}

// TestStreamFailover: once a member closes, the requests on its stream
// end and the client goes on at the next member.
func TestStreamFailover(t *testing.T) {
	a, srvA := localServer(t, Options{}, nil)
	_, srvB := localServer(t, Options{}, nil)
	c := streamClient(t, srvA.URL, srvB.URL)
	ctx := testContext(t)
	if i, err := c.Put(ctx, "k", []byte("a")); err != nil || i != 1 {
		t.Fatalf("Put at a: %d, %v", i, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if a.streamCount() != 0 {
		t.Fatal("a closed node still serves its stream")
	}
	if _, err := c.Put(ctx, "k", []byte("b")); err != nil {
		t.Fatalf("Put after a closed: %v", err)
	}
	if v, _, err := c.Get(ctx, "k"); err != nil || string(v) != "b" {
		t.Errorf("Get: %q, %v; want b from the other member", v, err)
	}
}

// rawStream upgrades a connection to srv by hand.
func rawStream(t *testing.T, srv *httptest.Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", wire.StreamPath, wire.Protocol)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	return conn, br
}

func readResponse(t *testing.T, br *bufio.Reader) wire.Response {
	t.Helper()
	frame, _, err := wire.ReadFrame(br, 1<<20, nil)
	if err != nil {
		t.Fatalf("reading an answer: %v", err)
	}
	r, err := wire.DecodeResponse(frame)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStreamBadInput: malformed and oversize requests get 400 and 413
// with their tags and the stream goes on; a frame that cannot carry a
// tag ends it; a request for the stream without an upgrade gets 426.
func TestStreamBadInput(t *testing.T) {
	_, srv := localServer(t, Options{MaxValueBytes: 64}, nil)
	conn, br := rawStream(t, srv)

	frame := func(body []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
	}
	bad := wire.AppendRequest(nil, &wire.Request{Tag: 7, Op: wire.OpPut, Key: "k"})
	bad[4+8] = 99 // an unknown op
	huge := binary.BigEndian.AppendUint32(nil, 1<<20)
	huge = binary.BigEndian.AppendUint64(huge, 8)
	huge = append(huge, make([]byte, 1<<20-8)...)
	good := wire.AppendRequest(nil, &wire.Request{Tag: 9, Op: wire.OpPut, Key: "k", Value: []byte("v")})
	emptyKey := wire.AppendRequest(nil, &wire.Request{Tag: 10, Op: wire.OpGet})
	var all []byte
	for _, f := range [][]byte{bad, huge, good, emptyKey} {
		all = append(all, f...)
	}
	if _, err := conn.Write(all); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]uint16{7: 400, 8: 413, 9: 200, 10: 400}
	for range len(want) {
		r := readResponse(t, br)
		if want[r.Tag] != r.Status {
			t.Errorf("tag %d: status %d (%s), want %d", r.Tag, r.Status, r.Body, want[r.Tag])
		}
		delete(want, r.Tag)
	}
	if len(want) > 0 {
		t.Errorf("no answers for tags %v", want)
	}

	// Four bytes of frame: no tag to answer.
	if _, err := conn.Write(frame([]byte{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	if _, _, err := wire.ReadFrame(br, 1<<20, nil); err == nil {
		t.Error("the stream went on after a frame without a tag")
	}

	resp, err := http.Get(srv.URL + wire.StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Upgrade") != wire.Protocol {
		t.Errorf("GET %s without an upgrade: %s, Upgrade %q; want 426 naming %s", wire.StreamPath, resp.Status, resp.Header.Get("Upgrade"), wire.Protocol)
	}
	if !strings.Contains(resp.Header.Get("Connection"), "Upgrade") {
		t.Errorf("426 without Connection: Upgrade")
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestStreamStuck: a member that upgrades the stream but answers nothing
// loses it once a call's attempt times out, and the call goes on at the
// next member.
func TestStreamStuck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{})
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		fmt.Fprintf(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", wire.Protocol)
		io.Copy(io.Discard, br) // until the client closes the stream
		close(closed)
	}()
	_, srv := localServer(t, Options{}, nil)
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	c := client.New([]string{"http://" + ln.Addr().String(), srv.URL}, client.WithHTTPClient(hc), client.WithStreams(),
		client.WithAttemptTimeout(100*time.Millisecond), client.WithBackoff(time.Millisecond, 5*time.Millisecond))
	defer c.Close()
	if _, err := c.Put(testContext(t), "k", []byte("v")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the stuck member's stream is still open")
	}
}

// TestClientIssued: the Go client's writes carry their issued time, over
// HTTP and over streams, in the form the member reads (the member's own
// clock, 5 s ahead here, would stamp them otherwise); the client's
// RequestLifetime is the state machine's.
func TestClientIssued(t *testing.T) {
	if client.RequestLifetime != RequestLifetime {
		t.Fatalf("client.RequestLifetime %v, RequestLifetime %v", client.RequestLifetime, RequestLifetime)
	}
	for _, streams := range []bool{false, true} {
		t.Run(fmt.Sprintf("streams=%v", streams), func(t *testing.T) {
			n, srv := localServer(t, Options{}, nil)
			n.now = func() time.Time { return time.Now().Add(5 * time.Second) }
			c := streamClient(t, srv.URL)
			if !streams {
				tr := &http.Transport{}
				t.Cleanup(tr.CloseIdleConnections)
				c = client.New([]string{srv.URL}, client.WithHTTPClient(&http.Client{Transport: tr}))
			}
			before := time.Now().UnixNano()
			if _, err := c.Put(testContext(t), "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			after := time.Now().UnixNano()
			n.state.mu.RLock()
			var issued []int64
			for k := range n.state.mu.order.all() {
				issued = append(issued, k.issued)
			}
			n.state.mu.RUnlock()
			if len(issued) != 1 || issued[0] < before || issued[0] > after {
				t.Fatalf("issued times kept %v, want one from %d to %d", issued, before, after)
			}
		})
	}
}

// TestStreamWorkers: a stream serves its requests on workers that it
// keeps while requests come — one request at a time takes one worker, k
// at once at most k — and a worker ends once no request came for
// streamWorkerIdle.
func TestStreamWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, err := NewLocal(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		server, conn := net.Pipe()
		s := n.newStream(server)
		served := make(chan struct{})
		go func() {
			defer close(served)
			s.serve(bufio.NewReader(server))
		}()
		ended := false
		defer func() {
			// Also when a check fails: the bubble must end with no
			// goroutine left.
			if !ended {
				conn.Close()
				<-served
			}
		}()
		br := bufio.NewReader(conn)
		send := func(first, count uint64) error {
			var b []byte
			for tag := first; tag < first+count; tag++ {
				b = wire.AppendRequest(b, &wire.Request{Tag: tag, Op: wire.OpPut, Key: fmt.Sprint("k", tag), Value: []byte("v")})
			}
			_, err := conn.Write(b)
			return err
		}
		answer := func(tags map[uint64]bool) {
			t.Helper()
			r := readResponse(t, br)
			if !tags[r.Tag] || r.Status != http.StatusOK {
				t.Fatalf("answer %+v, want 200 to one of %v", r, tags)
			}
			delete(tags, r.Tag)
		}
		workers := func() int {
			synctest.Wait()
			return len(s.sem)
		}
		for tag := uint64(1); tag <= 10; tag++ {
			if err := send(tag, 1); err != nil {
				t.Fatal(err)
			}
			answer(map[uint64]bool{tag: true})
			// The worker waits for the next request before it comes
			// (else the stream may rightly start another for it).
			synctest.Wait()
		}
		if w := workers(); w != 1 {
			t.Fatalf("%d workers after requests one at a time, want 1", w)
		}
		time.Sleep(streamWorkerIdle / 2)
		if w := workers(); w != 1 {
			t.Fatalf("%d workers before the idle time, want 1", w)
		}
		time.Sleep(streamWorkerIdle)
		if w := workers(); w != 0 {
			t.Fatalf("%d workers once idle, want 0", w)
		}
		const k = 16
		sent := make(chan error, 1)
		go func() { sent <- send(100, k) }()
		tags := make(map[uint64]bool)
		for tag := uint64(100); tag < 100+k; tag++ {
			tags[tag] = true
		}
		for range k {
			answer(tags)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if w := workers(); w < 1 || w > k {
			t.Fatalf("%d workers after %d requests at once, want 1 to %d", w, k, k)
		}
		ended = true
		conn.Close()
		<-served
		if w := workers(); w != 0 {
			t.Fatalf("%d workers after the stream ended, want 0", w)
		}
	})
}

// TestStreamBatch: writes that arrive together go to the group as one
// message, applied at one index, each answered under its own tag; a
// read ends the batch, and a write the member refuses (a value above
// MaxValueBytes) is answered alone while the others go on.
func TestStreamBatch(t *testing.T) {
	n, srv := localServer(t, Options{MaxValueBytes: 64}, nil)
	conn, br := rawStream(t, srv)
	var all []byte
	req := func(r wire.Request) { all = wire.AppendRequest(all, &r) }
	for i := range 8 {
		req(wire.Request{Tag: uint64(1 + i), Op: wire.OpPut, Key: fmt.Sprintf("k%d", i), ID: fmt.Sprintf("id-%d", i), Value: []byte("v")})
	}
	req(wire.Request{Tag: 9, Op: wire.OpPut, Key: "big", ID: "id-big", Value: make([]byte, 65)})
	req(wire.Request{Tag: 10, Op: wire.OpDelete, Key: "k0", ID: "id-del"})
	req(wire.Request{Tag: 11, Op: wire.OpGet, Key: "none"})
	req(wire.Request{Tag: 12, Op: wire.OpPut, Key: "after", ID: "id-after", Value: []byte("w")})
	req(wire.Request{Tag: 13, Op: wire.OpCAS, Key: "after", ID: "id-cas", HasOld: true, Old: []byte("w"), Value: []byte("x")})
	// One write: the loopback connection delivers it whole, and the
	// member reads it at once.
	if _, err := conn.Write(all); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]wire.Response{}
	for range 13 {
		r := readResponse(t, br)
		got[r.Tag] = r
	}
	first := got[1].Index
	for tag := uint64(1); tag <= 10; tag++ {
		r := got[tag]
		want := uint16(http.StatusOK)
		if tag == 9 {
			want = http.StatusRequestEntityTooLarge
		}
		if r.Status != want {
			t.Errorf("tag %d: status %d (%s), want %d", tag, r.Status, r.Body, want)
		}
		if tag != 9 && r.Index != first {
			t.Errorf("tag %d: applied at %d, the batch's first write at %d", tag, r.Index, first)
		}
	}
	if r := got[11]; r.Status != http.StatusNotFound {
		t.Errorf("the read of a missing key: %d %q, want 404", r.Status, r.Body)
	}
	// Requests in flight at once are served in no set order: the second
	// batch may apply before the first.
	if a, c := got[12], got[13]; a.Status != http.StatusOK || c.Status != http.StatusOK || !c.OK || a.Index != c.Index || a.Index == first {
		t.Errorf("the writes after the read: %+v, %+v; want both applied at one index other than %d, the cas swapping", a, c, first)
	}
	if _, found, _ := n.state.get("k0"); found {
		t.Error("k0 exists: the delete in the batch after its put did not apply after it")
	}
	if v, _, _ := n.state.get("after"); string(v) != "x" {
		t.Errorf("after = %q, want x", v)
	}
}
