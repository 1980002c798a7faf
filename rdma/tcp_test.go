package rdma

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// connErrors collects what OnConnError reports.
type connErrors chan error

func (ch connErrors) hook(peer NodeID, err error) {
	select {
	case ch <- err:
	default:
	}
}

func (ch connErrors) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(waitTimeout):
		t.Fatal("OnConnError was not called")
		return nil
	}
}

// rawPeer dials ep and says hello as node id, then hands back the socket.
func rawPeer(t *testing.T, ep *TCPEndpoint, id NodeID) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", ep.Addr().String())
	must(t, err)
	t.Cleanup(func() { nc.Close() })
	var b [helloLen]byte
	encodeHello(b[:], id)
	_, err = nc.Write(b[:])
	must(t, err)
	must(t, nc.SetReadDeadline(time.Now().Add(waitTimeout)))
	_, err = io.ReadFull(nc, b[:])
	must(t, err)
	got, err := decodeHello(b[:])
	must(t, err)
	if got != ep.ID() {
		t.Fatalf("hello from node %d, want %d", got, ep.ID())
	}
	return nc
}

// header encodes a frame header.
func header(typ frameType, length uint32, stream StreamID, imm uint64) []byte {
	b := make([]byte, frameHeaderLen)
	encodeFrameHeader(b, frameHeader{typ: typ, length: length, stream: stream, imm: imm})
	return b
}

// expectClosed checks that the endpoint closes nc.
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	must(t, nc.SetReadDeadline(time.Now().Add(waitTimeout)))
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("endpoint did not close the connection")
	}
}

// rejectedReader collects an endpoint's metrics.
type rejectedReader struct{ *sdkmetric.ManualReader }

// newRejectedReader returns a meter provider, shut down when t ends, and
// its reader.
func newRejectedReader(t *testing.T) (*sdkmetric.MeterProvider, rejectedReader) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return mp, rejectedReader{reader}
}

// counts returns the rejected frames counted so far, by reason.
func (r rejectedReader) counts(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	must(t, r.Collect(context.Background(), &rm))
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "convoy.rdma.rejected.frames" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				reason, _ := dp.Attributes.Value("reason")
				out[reason.AsString()] += dp.Value
			}
		}
	}
	return out
}

// waitCounts waits until the rejected frames counted are want.
func (r rejectedReader) waitCounts(t *testing.T, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := r.counts(t)
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rejected frames by reason: %v, want %v", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTCPBadInput(t *testing.T) {
	withReserved := header(frameSignal, 0, 1, 0)
	withReserved[2] = 1
	cases := []struct {
		name   string
		input  []byte
		want   string // in the reported error
		reason string // counted in the metric
	}{
		{"oversize", header(frameData, 4096, 1, 0), "exceeds the limit", "oversize"},
		{"unknown type", header(9, 0, 1, 0), "unknown frame type 9", "malformed"},
		{"reserved bits", withReserved, "non-zero reserved", "malformed"},
		{"signal with payload", header(frameSignal, 4, 1, 0), "signal frame with a 4-byte payload", "malformed"},
		{"close with payload", header(frameClose, 4, 1, 0), "close frame with a 4-byte payload", "malformed"},
		{"unknown stream", append(header(frameData, 3, 77, 0), 1, 2, 3), "stream 77, which was never opened", "stream"},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"), "frame", "malformed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(connErrors, 10)
			n := newTCPNet(t, TCPConfig{MaxFrameBytes: 1024 + frameHeaderLen, OnConnError: errs.hook})
			mp, rejected := newRejectedReader(t)
			ep := n.tcpEndpoint(10, func(c *TCPConfig) { c.MeterProvider = mp })
			r := newRecorder(t, "victim")
			_, err := ep.Open(context.Background(), 5, 1, r)
			must(t, err)

			nc := rawPeer(t, ep, 5)
			_, err = nc.Write(tc.input)
			must(t, err)
			expectClosed(t, nc)
			err = errs.wait(t)
			var perr *ProtocolError
			if !errors.As(err, &perr) || perr.Peer != 5 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reported %v, want a *ProtocolError from node 5 mentioning %q", err, tc.want)
			}
			t.Logf("reported: %v", err)
			if got, want := rejected.counts(t), map[string]int64{tc.reason: 1}; !reflect.DeepEqual(got, want) {
				t.Errorf("rejected frames by reason: %v, want %v", got, want)
			}
			err = r.waitFailed(ErrConnectionLost)
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("queue pair failed with %v, want ErrProtocol too", err)
			}

			// The endpoint serves a new, good connection from the same node.
			good := n.endpoint(5)
			pa, pb := openPair(t, good, ep, 2)
			transfer(t, pa, pb, []int{100, 0})
			transfer(t, pb, pa, []int{1000})
		})
	}
}

// A transfer into no posted buffer, or one too small, fails its queue
// pair alone and counts as a rejected frame.
func TestTCPRejectedTransfer(t *testing.T) {
	n := newTCPNet(t, TCPConfig{})
	mp, rejected := newRejectedReader(t)
	a, b := n.endpoint(1), n.tcpEndpoint(2, func(c *TCPConfig) { c.MeterProvider = mp })
	bad, badB := openPair(t, a, b, 1)
	small, smallB := openPair(t, a, b, 2)
	must(t, bad.qp.PostSend([]byte("no buffer"), 0, 1))
	badB.r.waitFailed(ErrProtocol)
	must(t, smallB.qp.PostRecv(make([]byte, 4), 1))
	must(t, small.qp.PostSend([]byte("too big"), 0, 1))
	smallB.r.waitFailed(ErrProtocol)
	if got, want := rejected.counts(t), map[string]int64{"receive_buffer": 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("rejected frames by reason: %v, want %v", got, want)
	}
}

func TestTCPTooManyPendingSignals(t *testing.T) {
	errs := make(connErrors, 10)
	n := newTCPNet(t, TCPConfig{OnConnError: errs.hook})
	ep := n.tcpEndpoint(10, func(*TCPConfig) {})
	nc := rawPeer(t, ep, 5)
	var buf []byte
	for i := range maxPendingSignals + 1 {
		buf = append(buf, header(frameSignal, 0, StreamID(i), 0)...)
	}
	_, err := nc.Write(buf)
	must(t, err)
	expectClosed(t, nc)
	if err := errs.wait(t); !errors.Is(err, ErrProtocol) {
		t.Fatalf("reported %v, want a protocol error", err)
	}
}

func TestTCPHandshakeRejected(t *testing.T) {
	cases := []struct {
		name   string
		hello  func() []byte
		want   string
		reason string
	}{
		{"garbage", func() []byte { return []byte("SSH-2.0-OpenSSH_9.6\r\n") }, "magic", "handshake"},
		{"higher id", func() []byte { b := make([]byte, helloLen); encodeHello(b, 11); return b }, "lower id dials", "handshake"},
		{"own id", func() []byte { b := make([]byte, helloLen); encodeHello(b, 10); return b }, "own id", "identity"},
		{"version", func() []byte { b := make([]byte, helloLen); encodeHello(b, 1); b[5] = 9; return b }, "version", "handshake"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(connErrors, 10)
			n := newTCPNet(t, TCPConfig{OnConnError: errs.hook})
			mp, rejected := newRejectedReader(t)
			ep := n.tcpEndpoint(10, func(c *TCPConfig) { c.MeterProvider = mp })
			nc, err := net.Dial("tcp", ep.Addr().String())
			must(t, err)
			defer nc.Close()
			_, err = nc.Write(tc.hello())
			must(t, err)
			expectClosed(t, nc)
			err = errs.wait(t)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reported %v, want a protocol error mentioning %q", err, tc.want)
			}
			t.Logf("reported: %v", err)
			if got, want := rejected.counts(t), map[string]int64{tc.reason: 1}; !reflect.DeepEqual(got, want) {
				t.Errorf("rejected frames by reason: %v, want %v", got, want)
			}
			good := n.endpoint(1)
			pa, pb := openPair(t, good, ep, 1)
			transfer(t, pa, pb, []int{10})
		})
	}
}

func TestTCPSilentPeerTimesOut(t *testing.T) {
	errs := make(connErrors, 10)
	n := newTCPNet(t, TCPConfig{OnConnError: errs.hook, DialTimeout: 100 * time.Millisecond})
	ep := n.tcpEndpoint(10, func(*TCPConfig) {})
	nc, err := net.Dial("tcp", ep.Addr().String())
	must(t, err)
	defer nc.Close()
	expectClosed(t, nc) // never says hello
	errs.wait(t)
}

func TestTCPUnreachable(t *testing.T) {
	// Nothing listens at the address node 2 resolves to.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	errs := make(connErrors, 10)
	n := newTCPNet(t, TCPConfig{DialTimeout: 200 * time.Millisecond, OnConnError: errs.hook})
	a := n.tcpEndpoint(1, func(c *TCPConfig) {
		c.Resolve = func(NodeID) (string, error) { return addr, nil }
	})
	r := newRecorder(t, "dialer")
	q, err := a.Open(context.Background(), 2, 1, r)
	must(t, err)
	// Queued until the connection is up, or refused if the dial failed
	// already.
	if err := q.Signal(1); err != nil && !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Signal = %v", err)
	}
	err = r.waitFailed(ErrUnreachable)
	t.Logf("dialer: %v", err)
	errs.wait(t)

	// The higher node waits for a connection that never comes.
	b := n.tcpEndpoint(5, func(*TCPConfig) {})
	r = newRecorder(t, "waiter")
	_, err = b.Open(context.Background(), 3, 1, r)
	must(t, err)
	err = r.waitFailed(ErrUnreachable)
	t.Logf("waiter: %v", err)
	if a.numConns()+b.numConns() != 0 {
		t.Error("failed connections were kept")
	}
}

func TestTCPLargestTransfer(t *testing.T) {
	n := newTCPNet(t, TCPConfig{MaxFrameBytes: 1000 + frameHeaderLen})
	a, b := n.endpoint(1), n.endpoint(2)
	pa, pb := openPair(t, a, b, 1)
	transfer(t, pa, pb, []int{1000})
	if err := pa.qp.PostSend(make([]byte, 1001), 0, 0); err == nil {
		t.Fatal("PostSend beyond MaxFrameBytes succeeded")
	}
}

func TestTCPMetrics(t *testing.T) {
	m := metrictest.New(t)
	n := newTCPNet(t, TCPConfig{})
	a := n.tcpEndpoint(1, func(c *TCPConfig) { c.MeterProvider = m.Provider })
	b := n.endpoint(2)
	for s := range 4 {
		pa, pb := openPair(t, a, b, StreamID(s))
		transfer(t, pa, pb, []int{100, 200})
	}
	got := m.Sums(t)
	if got["convoy.rdma.connections.opened"] != 1 {
		t.Errorf("connections opened = %d, want 1 (all streams share one)", got["convoy.rdma.connections.opened"])
	}
	// 4 streams × (ready signal received, 2 data frames sent).
	if got["convoy.rdma.frames.sent"] != 8 || got["convoy.rdma.frames.received"] != 4 {
		t.Errorf("frames sent/received = %d/%d, want 8/4", got["convoy.rdma.frames.sent"], got["convoy.rdma.frames.received"])
	}
	if want := int64(4 * (2*frameHeaderLen + 300)); got["convoy.rdma.bytes.sent"] != want {
		t.Errorf("bytes sent = %d, want %d", got["convoy.rdma.bytes.sent"], want)
	}
	// The frame counts are reported until the endpoint closes.
	must(t, a.Close())
	got = m.Sums(t)
	for _, name := range []string{"convoy.rdma.frames.sent", "convoy.rdma.frames.received", "convoy.rdma.bytes.sent", "convoy.rdma.bytes.received"} {
		if n, ok := got[name]; ok {
			t.Errorf("after Close: %s = %d, want it no longer reported", name, n)
		}
	}
}

func TestTCPConfigDefaults(t *testing.T) {
	cfg, err := TCPConfig{ID: 3}.WithDefaults()
	must(t, err)
	if cfg.ListenAddr != DefaultListenAddr || cfg.MaxFrameBytes != DefaultMaxFrameBytes ||
		cfg.DialTimeout != DefaultDialTimeout || cfg.Logger == nil || cfg.MeterProvider == nil {
		t.Errorf("defaults not filled: %+v", cfg)
	}
	for _, bad := range []TCPConfig{{MaxFrameBytes: 3}, {DialTimeout: -1}, {SocketBufferBytes: -1}} {
		if _, err := bad.WithDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestTCPCloseWithTrafficInFlight(t *testing.T) {
	n := newTCPNet(t, TCPConfig{})
	a, b := n.endpoint(1), n.endpoint(2)
	pa, pb := openPair(t, a, b, 1)
	for i := range 64 {
		must(t, pb.qp.PostRecv(make([]byte, 1<<16), uint64(i)))
	}
	must(t, pb.qp.Signal(0))
	pa.r.waitCount("signal", 1)
	for i := range 64 {
		must(t, pa.qp.PostSend(make([]byte, 1<<16), 0, uint64(i)))
	}
	// Closing both endpoints mid-transfer must neither hang nor leak, and
	// the closed side gets no Failed.
	must(t, b.Close())
	must(t, a.Close())
	if pb.r.count("failed") != 0 {
		t.Error("Failed after Close")
	}
}

// A peer that restarts elsewhere while the process it left behind still
// holds the connection (a member restarted as a new incarnation, its old
// one still running): the next queue pair to it goes to where Resolve
// says it is now, and the connection to the old place is dropped, failing
// the queue pairs on it.
func TestTCPPeerMoved(t *testing.T) {
	n := newTCPNet(t, TCPConfig{})
	a := n.endpoint(1)
	old := n.tcpEndpoint(2, func(*TCPConfig) {})
	pa, pb := openPair(t, a, old, 1)
	transfer(t, pa, pb, []int{10})

	moved := n.tcpEndpoint(2, func(*TCPConfig) {}) // Resolve gives its address from now on
	qa, qb := openPair(t, a, moved, 2)
	transfer(t, qa, qb, []int{10})
	if err := pa.r.waitFailed(ErrConnectionLost); !strings.Contains(err.Error(), "moved to "+moved.Addr().String()) {
		t.Fatalf("the queue pair to where the peer was: %v", err)
	}
	// The peer left behind learns of the drop when its reader sees the
	// connection close; it forgets the connection before it fails the
	// queue pairs on it.
	pb.r.waitFailed(ErrConnectionLost)
	if got := old.numConns(); got != 0 {
		t.Fatalf("the peer left behind holds %d connections", got)
	}
}

// Frames that arrive for a stream this node closed (sent before the
// peer learned of the close) are dropped and counted as late; the
// connection stays up, and they count as no bad input.
func TestTCPLateFrames(t *testing.T) {
	n := newTCPNet(t, TCPConfig{})
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ep := n.tcpEndpoint(10, func(c *TCPConfig) { c.MeterProvider = mp })
	closed, err := ep.Open(context.Background(), 5, 1, newRecorder(t, "closed"))
	must(t, err)
	open := newRecorder(t, "open")
	_, err = ep.Open(context.Background(), 5, 2, open)
	must(t, err)
	nc := rawPeer(t, ep, 5)
	must(t, closed.Close())

	in := append(header(frameData, 3, 1, 0), 1, 2, 3)
	in = append(in, header(frameSignal, 0, 1, 7)...)
	in = append(in, header(frameSignal, 0, 2, 9)...) // in order after them: once it is in, they were read
	_, err = nc.Write(in)
	must(t, err)
	open.waitCount("signal", 1)
	var rm metricdata.ResourceMetrics
	must(t, reader.Collect(context.Background(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					got[m.Name] += dp.Value
				}
			}
		}
	}
	if got["convoy.rdma.late.frames"] != 2 || got["convoy.rdma.rejected.frames"] != 0 || got["convoy.rdma.connections.broken"] != 0 {
		t.Errorf("late, rejected frames and broken connections = %d, %d, %d; want 2, 0, 0", got["convoy.rdma.late.frames"],
			got["convoy.rdma.rejected.frames"], got["convoy.rdma.connections.broken"])
	}
}
