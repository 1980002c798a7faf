//go:build fabric

package rdma

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// The pairing of stream instances, step by step: two connections' control
// logic wired together in memory, records handed over by the test in the
// orders that race on a network. The node with id 1 pairs (it has the
// lower id); node 2 follows its pair records.

// pairNet is the two ends of one control connection, with no libfabric
// underneath: records queue in each end's out queue until deliver hands
// them over.
type pairNet struct {
	t      *testing.T
	lo, hi *fabConn
}

func newPairNet(t *testing.T) *pairNet { return newPairNetMetered(t, noop.NewMeterProvider()) }

// newPairNetMetered is newPairNet with node 2's metrics going to mp.
func newPairNetMetered(t *testing.T, mp metric.MeterProvider) *pairNet {
	end := func(id, peer NodeID) *fabConn {
		var p metric.MeterProvider = noop.NewMeterProvider()
		if id == 2 {
			p = mp
		}
		m, err := newEndpointMetrics(p)
		must(t, err)
		t.Cleanup(m.close)
		e := &FabricEndpoint{cfg: FabricConfig{ID: id}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), metrics: m}
		e.mu.conns = make(map[NodeID]*fabConn)
		e.mu.eps = make(map[uint64]*fep)
		c := newFabConn(e, peer)
		c.mu.state = connUp // no endpoint: flushes leave records queued
		return c
	}
	return &pairNet{t: t, lo: end(1, 2), hi: end(2, 1)}
}

// open opens stream 7 on c as Open does, and returns its end.
func (n *pairNet) open(c *fabConn, name string) qpEnd {
	q := &fabQP{e: c.e}
	r := newRecorder(n.t, name)
	q.init(c.peer, 7, r)
	q.mu.Lock()
	peerInst, paired, pending, err := c.addStream(q)
	must(n.t, err)
	mustRun := paired && q.pairLocked(peerInst, pending)
	q.mu.Unlock()
	if mustRun {
		q.run()
	}
	return qpEnd{q, r}
}

// deliver hands the records queued at from to its peer, as the control
// connection would: all of them, in order.
func (n *pairNet) deliver(from *fabConn) {
	to := n.lo
	if from == n.lo {
		to = n.hi
	}
	from.mu.Lock()
	recs := make([]ctrlRecord, 0, from.mu.out.len())
	for i := range from.mu.out.len() {
		recs = append(recs, from.mu.out.at(i).ctrlRecord)
	}
	from.sentLocked(len(recs))
	from.mu.Unlock()
	for _, r := range recs {
		to.mu.Lock()
		q, pending, err := to.recordLocked(r)
		to.mu.Unlock()
		if err != nil {
			n.t.Fatalf("node %d: %v record: %v", to.e.cfg.ID, r.typ, err)
		}
		if q != nil {
			q.apply(r, pending)
		}
	}
}

// paired reports whether a and b are paired with each other.
func paired(a, b qpEnd) bool {
	qa, qb := a.qp.(*fabQP), b.qp.(*fabQP)
	qa.mu.Lock()
	defer qa.mu.Unlock()
	qb.mu.Lock()
	defer qb.mu.Unlock()
	return qa.paired && qb.paired && qa.peerInst == qb.inst && qb.peerInst == qa.inst
}

func failedWith(e qpEnd, target error) bool {
	evs := e.r.snapshot()
	return len(evs) > 0 && evs[len(evs)-1].kind == "failed" && errors.Is(evs[len(evs)-1].err, target)
}

// The higher node closes its instance before it hears of the lower
// node's: the lower node pairs the two and fails with ErrPeerClosed; the
// higher node's next instance pairs with the lower node's next, not with
// the one that failed.
func TestFabricPairHigherClosesFirst(t *testing.T) {
	n := newPairNet(t)
	a1 := n.open(n.lo, "a1")
	b1 := n.open(n.hi, "b1")
	must(t, b1.qp.Close())
	n.deliver(n.lo) // open a1 reaches node 2, whose b1 is gone
	n.deliver(n.hi) // open b1, close b1: a1 pairs with b1, and fails
	if !failedWith(a1, ErrPeerClosed) {
		t.Fatalf("a1: %v, want Failed(ErrPeerClosed)", a1.r.snapshot())
	}
	must(t, a1.qp.Close())
	b2 := n.open(n.hi, "b2")
	n.deliver(n.lo) // pair a1-b1, close a1: b2 is untouched
	a2 := n.open(n.lo, "a2")
	n.deliver(n.hi) // open b2: a2 pairs with it
	n.deliver(n.lo) // open a2, pair a2-b2
	if !paired(a2, b2) {
		t.Fatal("a2 and b2 did not pair")
	}
	must(t, a2.qp.Signal(1))
	must(t, b2.qp.Signal(2))
	n.deliver(n.lo)
	n.deliver(n.hi)
	if got := b2.r.snapshot(); len(got) != 1 || got[0].kind != "signal" || got[0].imm != 1 {
		t.Errorf("b2: %v, want signal(imm=1)", got)
	}
	if got := a2.r.snapshot(); len(got) != 1 || got[0].kind != "signal" || got[0].imm != 2 {
		t.Errorf("a2: %v, want signal(imm=2)", got)
	}
	if b1.r.count("failed") != 0 {
		t.Error("b1 failed after Close")
	}
}

// The lower node closes its instance before it hears of the higher
// node's: as on tcp the close fails the higher node's open queue pair,
// and the lower node, which learns from the record counts that this
// instance opened before the close reached it, pairs its next instance
// with the higher node's next, not with the one that fails.
func TestFabricPairLowerClosesFirst(t *testing.T) {
	n := newPairNet(t)
	a1 := n.open(n.lo, "a1")
	b1 := n.open(n.hi, "b1")
	must(t, a1.qp.Close())
	a2 := n.open(n.lo, "a2")
	n.deliver(n.lo) // open a1, close a1, open a2: b1 fails
	if !failedWith(b1, ErrPeerClosed) {
		t.Fatalf("b1: %v, want Failed(ErrPeerClosed)", b1.r.snapshot())
	}
	must(t, b1.qp.Close())
	b2 := n.open(n.hi, "b2")
	n.deliver(n.hi) // open b1 (before the close: a2 must not pair with it), close b1, open b2
	n.deliver(n.lo) // pair a2-b2
	if !paired(a2, b2) {
		t.Fatal("a2 and b2 did not pair")
	}
	if a2.r.count("failed")+b2.r.count("failed") != 0 {
		t.Errorf("a2: %v, b2: %v, want no failure", a2.r.snapshot(), b2.r.snapshot())
	}
}

// signalBeforePairing opens queue pair a on node 1, which signals 0, 1
// and 2 before node 2 has one, then b on node 2, which signals 10 and 11;
// it delivers node 2's records, so that a pairs and takes b's signals,
// but not yet node 1's: b has yet to learn of the pairing.
func signalBeforePairing(t *testing.T, n *pairNet) (a, b qpEnd) {
	t.Helper()
	a = n.open(n.lo, "a")
	for i := range 3 {
		must(t, a.qp.Signal(uint64(i)))
	}
	n.deliver(n.lo) // node 2 has no queue pair: the signals wait
	b = n.open(n.hi, "b")
	for i := range 2 {
		must(t, b.qp.Signal(uint64(10+i)))
	}
	n.deliver(n.hi) // a pairs and takes b's signals
	return a, b
}

// Signals sent before the pairing is known wait for it and arrive in
// order, on both sides.
func TestFabricPairSignalsBeforePairing(t *testing.T) {
	n := newPairNet(t)
	a, b := signalBeforePairing(t, n)
	n.deliver(n.lo) // b learns the pairing and takes a's
	if !paired(a, b) {
		t.Fatal("a and b did not pair")
	}
	for _, c := range []struct {
		end  qpEnd
		want []uint64
	}{{a, []uint64{10, 11}}, {b, []uint64{0, 1, 2}}} {
		got := c.end.r.snapshot()
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v, want signals %v", c.end.r.name, got, c.want)
		}
		for i, e := range got {
			if e.kind != "signal" || e.imm != c.want[i] {
				t.Fatalf("%s: %v, want signals %v", c.end.r.name, got, c.want)
			}
		}
	}
}

// Records that arrive for a queue pair this node closed (sent before the
// peer learned of the close) are dropped and counted as late, as are the
// records held for a pairing with a queue pair that is gone; they count as
// no bad input.
func TestFabricLateRecords(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	n := newPairNetMetered(t, mp)

	// Paired, then node 2 closes: node 1's two signals meanwhile are late.
	a := n.open(n.lo, "a")
	b := n.open(n.hi, "b")
	n.deliver(n.lo)
	n.deliver(n.hi)
	n.deliver(n.lo)
	if !paired(a, b) {
		t.Fatal("a and b did not pair")
	}
	must(t, b.qp.Close())
	must(t, a.qp.Signal(1))
	must(t, a.qp.Signal(2))
	n.deliver(n.lo)
	// Node 2's next instance closes before it learns of node 1's
	// pairing with it: the signal held for it is late too.
	n.deliver(n.hi) // close b: a fails and closes
	a2 := n.open(n.lo, "a2")
	must(t, a2.qp.Signal(3))
	b2 := n.open(n.hi, "b2")
	n.deliver(n.hi) // open b2: a2 pairs with it
	must(t, b2.qp.Close())
	n.deliver(n.lo) // close a, open a2, signal 3 (held), pair a2-b2 (b2 gone)

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
	if got["convoy.rdma.late.frames"] != 3 || got["convoy.rdma.rejected.frames"] != 0 {
		t.Errorf("late and rejected frames = %d, %d; want 3, 0", got["convoy.rdma.late.frames"], got["convoy.rdma.rejected.frames"])
	}
}
