//go:build fabric

package rdma

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/internal/metrictest"
)

// The endpoint says which provider it got, and listens where asked.
func TestFabricProvider(t *testing.T) {
	n := newFabricNet(t, FabricConfig{})
	ep := n.fabricEndpoint(1, func(*FabricConfig) {})
	if p := ep.Provider(); !strings.HasPrefix(p, "tcp ") || !strings.Contains(p, "domain lo") {
		t.Errorf("Provider() = %q, want libfabric's tcp provider on lo", p)
	}
	host, port, err := net.SplitHostPort(ep.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("Addr() = %q (%v), want 127.0.0.1 and the port chosen", ep.Addr(), err)
	}
	t.Logf("provider %s at %s", ep.Provider(), ep.Addr())
	if !ep.immData {
		t.Error("the tcp provider carries 8 bytes of completion data; immediate values should travel in it")
	}
	if _, err := ListenFabric(FabricConfig{ID: 2, Provider: "no-such-provider"}); err == nil {
		t.Error("ListenFabric with an unknown provider succeeded")
	} else {
		t.Logf("unknown provider: %v", err)
	}
}

// newImmHdrNet returns a net whose endpoints put immediate values in the
// data header, as on providers with less than 8 bytes of completion data.
func newImmHdrNet(t *testing.T) *fabricNet {
	n := newFabricNet(t, FabricConfig{})
	n.listen = func(cfg FabricConfig) (*FabricEndpoint, error) { return listenFabric(cfg, true) }
	return n
}

// The header path the verbs provider takes (4 bytes of completion data)
// carries the same transfers.
func TestFabricImmediateInHeader(t *testing.T) {
	n := newImmHdrNet(t)
	a, b := n.endpoint(1), n.endpoint(2)
	if a.(*FabricEndpoint).immData {
		t.Fatal("the immediate values still travel as completion data")
	}
	pa, pb := openPair(t, a, b, 1)
	transfer(t, pa, pb, []int{0, 1, 4096, 1 << 20, 7})
	transfer(t, pb, pa, []int{3, 0})
}

// Two nodes that disagree on where immediate values travel do not connect.
func TestFabricImmediateMismatch(t *testing.T) {
	errs := make(connErrors, 10)
	n := newFabricNet(t, FabricConfig{OnConnError: errs.hook, DialTimeout: 500 * time.Millisecond})
	a := n.endpoint(1)
	n.listen = func(cfg FabricConfig) (*FabricEndpoint, error) { return listenFabric(cfg, true) }
	b := n.endpoint(2)
	ra, rb := newRecorder(t, "a"), newRecorder(t, "b")
	_, err := a.Open(context.Background(), 2, 1, ra)
	must(t, err)
	_, err = b.Open(context.Background(), 1, 1, rb)
	must(t, err)
	ra.waitFailed(ErrUnreachable)
	rb.waitFailed(ErrUnreachable)
	if err := errs.wait(t); !errors.Is(err, ErrProtocol) {
		t.Errorf("reported %v, want a protocol error", err)
	}
}

// rawConnect connects from a to b with the given hello, as a peer that
// does not follow the protocol would.
func rawConnect(t *testing.T, a, b *FabricEndpoint, hello []byte) {
	t.Helper()
	host, port, err := net.SplitHostPort(b.Addr())
	must(t, err)
	info, err := getInfo(a.cfg.Provider, host, port, false, a.info.fabricName(), a.info.domainName())
	must(t, err)
	defer info.free()
	a.mu.Lock()
	c := newFabConn(a, b.ID()) // not in a's table: its events are ignored
	a.mu.Unlock()
	p, err := a.newFep(fabKindControl, c, nil, info, ctrlSlots, ctrlSlots, ctrlSlotLen)
	must(t, err)
	t.Cleanup(func() { p.shutdown() })
	must(t, p.ep.connect(info, hello))
}

func TestFabricHandshakeRejected(t *testing.T) {
	hello := func(h fabHello) func() []byte {
		return func() []byte {
			b := make([]byte, fabHelloLen)
			encodeFabHello(b, h)
			return b
		}
	}
	cases := []struct {
		name   string
		hello  func() []byte
		want   string
		reason string
	}{
		{"garbage", func() []byte { return []byte("SSH-2.0-OpenSSH_9.6p1 Debian-3, with some more bytes to fill a hello") }, "magic", "handshake"},
		{"higher id", hello(fabHello{kind: fabKindControl, from: 11, to: 10}), "lower id connects", "handshake"},
		{"own id", hello(fabHello{kind: fabKindControl, from: 10, to: 10}), "own id", "identity"},
		{"other node", hello(fabHello{kind: fabKindControl, from: 1, to: 12}), "for node 12", "identity"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := make(connErrors, 10)
			n := newFabricNet(t, FabricConfig{OnConnError: errs.hook})
			mp, rejected := newRejectedReader(t)
			ep := n.fabricEndpoint(10, func(c *FabricConfig) { c.MeterProvider = mp })
			raw := n.fabricEndpoint(20, func(*FabricConfig) {})
			rawConnect(t, raw, ep, tc.hello())
			err := errs.wait(t)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reported %v, want a protocol error mentioning %q", err, tc.want)
			}
			t.Logf("reported: %v", err)
			if got, want := rejected.counts(t), map[string]int64{tc.reason: 1}; !reflect.DeepEqual(got, want) {
				t.Errorf("rejected by reason: %v, want %v", got, want)
			}
			// The endpoint serves a good connection afterwards.
			good := n.endpoint(1)
			pa, pb := openPair(t, good, ep, 1)
			transfer(t, pa, pb, []int{10})
		})
	}
}

// Buffers are registered once: a buffer sent again, and the blocks sliced
// from one message, reuse the registration; with no cache, nothing stays
// registered once the transfers are done.
func TestFabricRegistrationReuse(t *testing.T) {
	for _, c := range []struct {
		name      string
		cache     int
		wantAfter int // registrations left once idle
	}{
		{"cached", 0, 2},
		{"uncached", -1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newFabricNet(t, FabricConfig{RegCacheBytes: c.cache})
			a := n.fabricEndpoint(1, func(*FabricConfig) {})
			b := n.fabricEndpoint(2, func(*FabricConfig) {})
			pa, pb := openPair(t, a, b, 1)
			const block, blocks = 4096, 16
			msg := pattern(1, block*blocks)
			dst := make([]byte, block*blocks)
			for round := range 3 {
				for i := range blocks {
					must(t, pb.qp.PostRecv(dst[i*block:(i+1)*block:(i+1)*block], uint64(i)))
				}
				must(t, pb.qp.Signal(0))
				pa.r.waitCount("signal", round+1)
				for i := range blocks {
					must(t, pa.qp.PostSend(msg[i*block:(i+1)*block], 0, uint64(i)))
				}
				pb.r.waitCount("recv", (round+1)*blocks)
				pa.r.waitCount("send", (round+1)*blocks)
			}
			if string(dst) != string(msg) {
				t.Fatal("payload differs")
			}
			// The sender's blocks share one registration, that of the
			// whole message (a slice reaches to the end of its capacity);
			// the receiver's, cut to their block, one each.
			na, idleA := a.regs.stats()
			nb, idleB := b.regs.stats()
			t.Logf("sender: %d registrations (%d idle); receiver: %d (%d idle)", na, idleA, nb, idleB)
			if c.cache >= 0 {
				if na != 1 || nb != blocks {
					t.Errorf("registrations: sender %d, receiver %d; want 1 and %d", na, nb, blocks)
				}
			} else if na+nb != 0 {
				t.Errorf("%d registrations left without a cache", na+nb)
			}
		})
	}
}

func TestFabricLargestTransfer(t *testing.T) {
	n := newFabricNet(t, FabricConfig{MaxTransferBytes: 1000})
	a, b := n.endpoint(1), n.endpoint(2)
	pa, pb := openPair(t, a, b, 1)
	transfer(t, pa, pb, []int{1000})
	if err := pa.qp.PostSend(make([]byte, 1001), 0, 0); err == nil {
		t.Fatal("PostSend beyond MaxTransferBytes succeeded")
	}
}

// A fabric endpoint counts the data transfers and the signals it sends
// and receives, so that the frames and bytes one node counts as sent its
// peer counts as received, whether a signal came before its queue pair
// paired or after; a signal refused as bad input counts as none; and the
// counts are no longer reported once the endpoint closes.
func TestFabricMetrics(t *testing.T) {
	const (
		framesSent = "convoy.rdma.frames.sent"
		framesRecv = "convoy.rdma.frames.received"
		bytesSent  = "convoy.rdma.bytes.sent"
		bytesRecv  = "convoy.rdma.bytes.received"
	)
	t.Run("transfers", func(t *testing.T) {
		ma, mb := metrictest.New(t), metrictest.New(t)
		n := newFabricNet(t, FabricConfig{})
		a := n.fabricEndpoint(1, func(c *FabricConfig) { c.MeterProvider = ma.Provider })
		b := n.fabricEndpoint(2, func(c *FabricConfig) { c.MeterProvider = mb.Provider })
		const streams = 4
		for s := range streams {
			pa, pb := openPair(t, a, b, StreamID(s))
			transfer(t, pa, pb, []int{100, 200})
			transfer(t, pb, pa, []int{300})
		}
		// Per stream, node 1 sends 3 frames: the transfers of 100 and 200
		// bytes, and the signal that it is ready for the transfer of 300
		// bytes; it receives 2: node 2's ready signal, and that transfer.
		// A transfer's bytes are its payload and its data header (hdrLen:
		// its sequence number, and its immediate value unless that
		// travels as completion data); a signal counts none. The control
		// records of the pairing and the credits count as no frames.
		h := int64(a.hdrLen)
		want := map[string]int64{
			framesSent: streams * 3,
			framesRecv: streams * 2,
			bytesSent:  streams * (2*h + 300),
			bytesRecv:  streams * (h + 300),
		}
		// Node 2 counts the same frames the other way round.
		mirror := map[string]string{framesSent: framesRecv, framesRecv: framesSent, bytesSent: bytesRecv, bytesRecv: bytesSent}
		gotA, gotB := ma.Sums(t), mb.Sums(t)
		for name, w := range want {
			if gotA[name] != w {
				t.Errorf("node 1: %s = %d, want %d", name, gotA[name], w)
			}
			if gotB[mirror[name]] != w {
				t.Errorf("node 2: %s = %d, want %d (node 1's %s)", mirror[name], gotB[mirror[name]], w, name)
			}
		}
		// The frame counts are reported until the endpoint closes.
		must(t, a.Close())
		gotA = ma.Sums(t)
		for name := range want {
			if v, ok := gotA[name]; ok {
				t.Errorf("after Close: %s = %d, want it no longer reported", name, v)
			}
		}
	})
	t.Run("signals before pairing", func(t *testing.T) {
		m := metrictest.New(t)
		n := newPairNetMetered(t, m.Provider) // node 2's metrics
		_, b := signalBeforePairing(t, n)
		if got := m.Sum(t, framesRecv); got != 0 {
			t.Errorf("before b paired: %s = %d, want 0 (the signals wait for the pairing)", framesRecv, got)
		}
		n.deliver(n.lo) // b learns the pairing and takes a's signals
		b.r.waitCount("signal", 3)
		// Node 2 sent its 2 signals, and received node 1's 3, which came
		// before it paired; signals count no bytes.
		for name, w := range map[string]int64{framesSent: 2, framesRecv: 3, bytesSent: 0, bytesRecv: 0} {
			if got := m.Sum(t, name); got != w {
				t.Errorf("node 2: %s = %d, want %d", name, got, w)
			}
		}
		// A signal that repeats a sequence number b delivered is refused:
		// b fails, and the signal counts as no frame received.
		r := ctrlRecord{typ: ctrlSignal, stream: 7, a: 1, b: 99}
		n.hi.mu.Lock()
		q, pending, err := n.hi.recordLocked(r)
		n.hi.mu.Unlock()
		must(t, err)
		if q == nil {
			t.Fatal("the repeated signal went to no queue pair")
		}
		q.apply(r, pending)
		b.r.waitFailed(ErrProtocol)
		if got := m.Sum(t, framesRecv); got != 3 {
			t.Errorf("after a refused signal: %s = %d, want 3", framesRecv, got)
		}
		if got := m.Sum(t, "convoy.rdma.rejected.frames", "reason", "malformed"); got != 1 {
			t.Errorf("rejected frames (malformed) = %d, want 1", got)
		}
	})
}

func TestFabricUnreachable(t *testing.T) {
	// Nothing listens at the address node 2 resolves to.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	errs := make(connErrors, 10)
	n := newFabricNet(t, FabricConfig{DialTimeout: 300 * time.Millisecond, OnConnError: errs.hook})
	a := n.fabricEndpoint(1, func(c *FabricConfig) {
		c.Resolve = func(NodeID) (string, error) { return addr, nil }
	})
	r := newRecorder(t, "connecting")
	q, err := a.Open(context.Background(), 2, 1, r)
	must(t, err)
	if err := q.Signal(1); err != nil && !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Signal = %v", err)
	}
	err = r.waitFailed(ErrUnreachable)
	t.Logf("connecting side: %v", err)
	errs.wait(t)

	// The higher node waits for a connection that never comes.
	b := n.fabricEndpoint(5, func(*FabricConfig) {})
	r = newRecorder(t, "waiting")
	_, err = b.Open(context.Background(), 3, 1, r)
	must(t, err)
	err = r.waitFailed(ErrUnreachable)
	t.Logf("waiting side: %v", err)
	if a.numConns()+b.numConns() != 0 {
		t.Error("failed connections were kept")
	}
}

// A peer that restarts is connected to afresh, at the address it now
// resolves to.
func TestFabricPeerRestarts(t *testing.T) {
	n := newFabricNet(t, FabricConfig{})
	a, b := n.endpoint(1), n.endpoint(2)
	pa, pb := openPair(t, a, b, 1)
	transfer(t, pa, pb, []int{10})
	must(t, b.Close())
	pa.r.waitFailed(ErrConnectionLost)
	b2 := n.endpoint(2)
	pa2, pb2 := openPair(t, a, b2, 1)
	transfer(t, pa2, pb2, []int{20, 0})
	transfer(t, pb2, pa2, []int{30})
}

func TestFabricCloseWithTrafficInFlight(t *testing.T) {
	n := newFabricNet(t, FabricConfig{})
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

// Closing a queue pair with receives posted and transfers in flight gives
// the buffers back: nothing stays registered for it, and the stream opens
// again.
func TestFabricCloseQueuePairInFlight(t *testing.T) {
	n := newFabricNet(t, FabricConfig{RegCacheBytes: -1})
	a := n.fabricEndpoint(1, func(*FabricConfig) {})
	b := n.fabricEndpoint(2, func(*FabricConfig) {})
	for round := range 3 {
		pa, pb := openPair(t, a, b, 1)
		for i := range 64 {
			must(t, pb.qp.PostRecv(make([]byte, 1<<16), uint64(i)))
		}
		must(t, pb.qp.Signal(0))
		pa.r.waitCount("signal", 1)
		for i := range 64 {
			must(t, pa.qp.PostSend(make([]byte, 1<<16), 0, uint64(i)))
		}
		must(t, pb.qp.Close())
		pa.r.waitFailed(ErrPeerClosed)
		must(t, pa.qp.Close())
		t.Logf("round %d: %d of 64 transfers arrived before Close", round, pb.r.count("recv"))
	}
	pa, pb := openPair(t, a, b, 1)
	transfer(t, pa, pb, []int{5})
	waitIdle(t, a)
	waitIdle(t, b)
}

// waitIdle waits until e holds no registration and only the endpoints of
// the streams still open.
func waitIdle(t *testing.T, e *FabricEndpoint) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		regs, _ := e.regs.stats()
		e.mu.Lock()
		eps := len(e.mu.eps)
		e.mu.Unlock()
		// One control endpoint and one data endpoint remain.
		if regs == 0 && eps == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d: %d registrations and %d endpoints left", e.ID(), regs, eps)
		}
		time.Sleep(time.Millisecond)
	}
}

// Both nodes send far more control records than the peer has slots for,
// at once, on several streams: credits and acknowledgements keep them
// flowing (neither side may wait for the other's acknowledgement while
// holding the last credit), and every signal arrives, in order.
func TestFabricControlFlow(t *testing.T) {
	n := newFabricNet(t, FabricConfig{})
	a, b := n.endpoint(1), n.endpoint(2)
	const streams, signals = 4, 5000
	var ends [streams][2]qpEnd
	for s := range streams {
		pa, pb := openPair(t, a, b, StreamID(s))
		ends[s] = [2]qpEnd{pa, pb}
	}
	done := make(chan struct{}, 2*streams)
	for s := range streams {
		for side := range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				for i := range signals {
					if err := ends[s][side].qp.Signal(uint64(i)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	for range 2 * streams {
		<-done
	}
	for s := range streams {
		for _, e := range ends[s] {
			for i, ev := range e.r.waitCount("signal", signals) {
				if ev.imm != uint64(i) {
					t.Fatalf("%s: signal %d has imm %d", e.r.name, i, ev.imm)
				}
			}
		}
	}
}

// A peer that restarts elsewhere while the process it left behind still
// holds the connection (a member restarted as a new incarnation, its old
// one still running): the next queue pair to it goes to where Resolve
// says it is now, and the connection to the old place is dropped, failing
// the queue pairs on it.
func TestFabricPeerMoved(t *testing.T) {
	n := newFabricNet(t, FabricConfig{})
	a := n.endpoint(1)
	old := n.fabricEndpoint(2, func(*FabricConfig) {})
	pa, pb := openPair(t, a, old, 1)
	transfer(t, pa, pb, []int{10})

	moved := n.fabricEndpoint(2, func(*FabricConfig) {}) // Resolve gives its address from now on
	qa, qb := openPair(t, a, moved, 2)
	transfer(t, qa, qb, []int{10})
	if err := pa.r.waitFailed(ErrConnectionLost); !strings.Contains(err.Error(), "moved to "+moved.Addr()) {
		t.Fatalf("the queue pair to where the peer was: %v", err)
	}
	pb.r.waitFailed(ErrConnectionLost)
	if got := old.numConns(); got != 0 {
		t.Fatalf("the peer left behind holds %d connections", got)
	}
}
