package rdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

// Conformance tests: every backend must pass them.

// qpEnd is one end of a queue pair under test.
type qpEnd struct {
	qp QueuePair
	r  *recorder
}

// openPair opens stream between a and b and returns both ends.
func openPair(t *testing.T, a, b Endpoint, stream StreamID) (qpEnd, qpEnd) {
	t.Helper()
	ctx := context.Background()
	ra := newRecorder(t, fmt.Sprintf("node %d stream %d", a.ID(), stream))
	rb := newRecorder(t, fmt.Sprintf("node %d stream %d", b.ID(), stream))
	qa, err := a.Open(ctx, b.ID(), stream, ra)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.Open(ctx, a.ID(), stream, rb)
	if err != nil {
		t.Fatal(err)
	}
	return qpEnd{qa, ra}, qpEnd{qb, rb}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pattern returns n bytes that depend on seed.
func pattern(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// transfer sends blocks of the given sizes from src to dst, the receiver
// posting every buffer first and then signalling readiness, and checks
// what arrives.
func transfer(t *testing.T, src, dst qpEnd, sizes []int) {
	t.Helper()
	baseRecv := dst.r.count("recv")
	baseSend := src.r.count("send")
	baseSig := src.r.count("signal")
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		bufs[i] = make([]byte, n+i%3) // some buffers larger than needed
		must(t, dst.qp.PostRecv(bufs[i], uint64(1000+i)))
	}
	must(t, dst.qp.Signal(uint64(len(sizes))))
	sig := src.r.waitCount("signal", baseSig+1)
	if sig[baseSig].imm != uint64(len(sizes)) {
		t.Fatalf("ready signal imm = %d, want %d", sig[baseSig].imm, len(sizes))
	}
	for i, n := range sizes {
		must(t, src.qp.PostSend(pattern(i, n), uint64(i)<<32|uint64(n), uint64(i)))
	}
	recvs := dst.r.waitCount("recv", baseRecv+len(sizes))[baseRecv:]
	for i, e := range recvs {
		if e.wr != uint64(1000+i) || e.n != sizes[i] || e.imm != uint64(i)<<32|uint64(sizes[i]) {
			t.Fatalf("receive %d = %v, want wr=%d n=%d imm=%d", i, e, 1000+i, sizes[i], uint64(i)<<32|uint64(sizes[i]))
		}
		if !bytes.Equal(bufs[i][:e.n], pattern(i, sizes[i])) {
			t.Fatalf("receive %d: payload differs", i)
		}
	}
	sends := src.r.waitCount("send", baseSend+len(sizes))[baseSend:]
	for i, e := range sends {
		if e.wr != uint64(i) {
			t.Fatalf("send completion %d has wr %d: completions out of order", i, e.wr)
		}
	}
}

func TestConformanceOrderedTransfer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		pa, pb := openPair(t, a, b, 7)
		var sizes []int
		for i := range 200 {
			switch i % 10 {
			case 0:
				sizes = append(sizes, 0)
			case 5:
				sizes = append(sizes, 1<<20)
			default:
				sizes = append(sizes, (i*7919)%70000)
			}
		}
		transfer(t, pa, pb, sizes)
		transfer(t, pb, pa, sizes[:50]) // and the other way
	})
}

func TestConformanceSignals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		pa, pb := openPair(t, a, b, 3)
		const count = 500
		for i := range count {
			must(t, pa.qp.Signal(uint64(i)))
			must(t, pb.qp.Signal(uint64(i)+1e6))
		}
		for _, c := range []struct {
			end  qpEnd
			base uint64
		}{{pb, 0}, {pa, 1e6}} {
			sigs := c.end.r.waitCount("signal", count)
			for i, e := range sigs {
				if e.imm != uint64(i)+c.base {
					t.Fatalf("%s: signal %d has imm %d, want %d", c.end.r.name, i, e.imm, uint64(i)+c.base)
				}
			}
		}
	})
}

func TestConformanceSignalBeforeOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		ctx := context.Background()
		// A second stream gets the connection up and shows when a's
		// signals have arrived (same connection, in order).
		pa, pb := openPair(t, a, b, 1)
		rb := newRecorder(t, "late")
		qa, err := a.Open(ctx, 2, 9, newRecorder(t, "early"))
		must(t, err)
		must(t, qa.Signal(41))
		must(t, qa.Signal(42))
		transfer(t, pa, pb, []int{10})
		qb, err := b.Open(ctx, 1, 9, rb)
		must(t, err)
		sigs := rb.waitCount("signal", 2)
		if sigs[0].imm != 41 || sigs[1].imm != 42 {
			t.Fatalf("signals %v, want imm 41 then 42", sigs)
		}
		_ = qb
	})
}

func TestConformanceSharedConnection(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		const streams = 20
		ends := make([][2]qpEnd, streams)
		for s := range streams {
			pa, pb := openPair(t, a, b, StreamID(100+s))
			ends[s] = [2]qpEnd{pa, pb}
		}
		done := make(chan struct{}, streams)
		for s := range streams {
			go func() {
				defer func() { done <- struct{}{} }()
				sizes := []int{s * 100, 0, 65536, s}
				src, dst := ends[s][0], ends[s][1]
				if s%2 == 1 {
					src, dst = dst, src
				}
				transfer(t, src, dst, sizes)
			}()
		}
		for range streams {
			<-done
		}
		if got := n.conns(1); got != 1 {
			t.Errorf("node 1 has %d connections, want 1", got)
		}
		if got := n.conns(2); got != 1 {
			t.Errorf("node 2 has %d connections, want 1", got)
		}
	})
}

func TestConformanceClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		pa, pb := openPair(t, a, b, 5)
		other, otherB := openPair(t, a, b, 6)
		transfer(t, pa, pb, []int{1, 2, 3})
		must(t, pa.qp.Close())
		pb.r.waitFailed(ErrPeerClosed)
		if err := pa.qp.PostSend([]byte{1}, 0, 0); !errors.Is(err, ErrClosed) {
			t.Errorf("PostSend after Close = %v, want ErrClosed", err)
		}
		if err := pb.qp.PostSend([]byte{1}, 0, 0); !errors.Is(err, ErrPeerClosed) {
			t.Errorf("PostSend on a queue pair the peer closed = %v, want ErrPeerClosed", err)
		}
		must(t, pb.qp.Close())
		must(t, pa.qp.Close()) // idempotent
		// The connection, shared with stream 6, survives.
		transfer(t, other, otherB, []int{100, 0})
		// The stream can be opened again.
		pa2, pb2 := openPair(t, a, b, 5)
		transfer(t, pa2, pb2, []int{7})
		if got := pa.r.count("failed") + pb.r.count("failed"); got != 1 {
			t.Errorf("%d Failed calls, want 1", got)
		}
		if got := pa.r.count("failed"); got != 0 {
			t.Errorf("closing side got Failed")
		}
	})
}

func TestConformanceStreamInUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, _ := n.endpoint(1), n.endpoint(2)
		ctx := context.Background()
		_, err := a.Open(ctx, 2, 1, newRecorder(t, "first"))
		must(t, err)
		if _, err := a.Open(ctx, 2, 1, newRecorder(t, "second")); !errors.Is(err, ErrStreamInUse) {
			t.Fatalf("second Open = %v, want ErrStreamInUse", err)
		}
		if _, err := a.Open(ctx, 1, 1, newRecorder(t, "self")); err == nil {
			t.Fatal("Open to self succeeded")
		}
		must(t, a.Close())
		if _, err := a.Open(ctx, 2, 2, newRecorder(t, "closed")); !errors.Is(err, ErrClosed) {
			t.Fatalf("Open after Close = %v, want ErrClosed", err)
		}
	})
}

func TestConformanceConnectionBreak(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b, c := n.endpoint(1), n.endpoint(2), n.endpoint(3)
		var ab [][2]qpEnd
		for s := range 5 {
			pa, pb := openPair(t, a, b, StreamID(s))
			transfer(t, pa, pb, []int{s})
			ab = append(ab, [2]qpEnd{pa, pb})
		}
		pa, pc := openPair(t, a, c, 0)
		transfer(t, pa, pc, []int{1})
		// Receives posted before the break are abandoned.
		must(t, ab[0][1].qp.PostRecv(make([]byte, 10), 1))

		n.breakLink(1, 2)
		for _, p := range ab {
			for _, e := range p {
				e.r.waitFailed(ErrConnectionLost)
				if err := e.qp.Signal(1); !errors.Is(err, ErrConnectionLost) {
					t.Errorf("Signal after the break = %v, want ErrConnectionLost", err)
				}
			}
		}
		// The link to node 3 is untouched.
		transfer(t, pa, pc, []int{2})
		// Open after the break makes a new connection.
		na, nb := openPair(t, a, b, 0)
		transfer(t, na, nb, []int{0, 5, 70000})
		transfer(t, nb, na, []int{3})
		for _, p := range ab {
			for _, e := range p {
				if got := e.r.count("failed"); got != 1 {
					t.Errorf("%s: %d Failed calls, want 1", e.r.name, got)
				}
				must(t, e.qp.Close())
			}
		}
		if pa.r.count("failed")+pc.r.count("failed") != 0 {
			t.Error("queue pairs on another connection failed")
		}
	})
}

func TestConformanceNoPostedBuffer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		bad, badB := openPair(t, a, b, 1)
		small, smallB := openPair(t, a, b, 2)
		good, goodB := openPair(t, a, b, 3)
		transfer(t, good, goodB, []int{10})

		must(t, bad.qp.PostSend([]byte("no buffer"), 0, 1))
		err := badB.r.waitFailed(ErrProtocol)
		var perr *ProtocolError
		if !errors.As(err, &perr) || perr.Peer != 1 || perr.Stream != 1 {
			t.Fatalf("Failed(%v), want a *ProtocolError from node 1 on stream 1", err)
		}
		t.Logf("no buffer: %v", err)

		must(t, smallB.qp.PostRecv(make([]byte, 4), 1))
		must(t, small.qp.PostSend([]byte("too big"), 0, 1))
		err = smallB.r.waitFailed(ErrProtocol)
		t.Logf("small buffer: %v", err)

		// Later frames for the failed streams are dropped, and the
		// connection carries on.
		must(t, bad.qp.PostSend([]byte("more"), 0, 2))
		must(t, bad.qp.Signal(3))
		transfer(t, good, goodB, []int{20, 0, 1 << 16})
		transfer(t, goodB, good, []int{5})
		if bad.r.count("failed")+small.r.count("failed")+good.r.count("failed")+goodB.r.count("failed") != 0 {
			t.Error("a queue pair other than the offended one failed")
		}
	})
}

func TestConformanceFramesAfterLocalClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, n testNet) {
		a, b := n.endpoint(1), n.endpoint(2)
		pa, pb := openPair(t, a, b, 1)
		other, otherB := openPair(t, a, b, 2)
		transfer(t, other, otherB, []int{1})
		// b closes; a keeps sending until it hears of it.
		must(t, pb.qp.Close())
		for i := range 10 {
			if err := pa.qp.PostSend(make([]byte, 100), 0, uint64(i)); err != nil {
				break
			}
			pa.qp.Signal(uint64(i))
		}
		pa.r.waitFailed(ErrPeerClosed)
		transfer(t, other, otherB, []int{2, 3})
		if pb.r.count("failed") != 0 || other.r.count("failed")+otherB.r.count("failed") != 0 {
			t.Error("unexpected Failed")
		}
	})
}
