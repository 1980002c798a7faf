package rdma

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// traceHandler appends every call to a shared log and relays: on a
// receive it forwards the block to the next node, if any.
type traceHandler struct {
	log   *[]string
	name  string
	relay func(imm uint64)
}

func (h *traceHandler) add(format string, args ...any) {
	*h.log = append(*h.log, h.name+" "+fmt.Sprintf(format, args...))
}
func (h *traceHandler) RecvComplete(wr uint64, n int, imm uint64) {
	h.add("recv wr=%d n=%d imm=%d", wr, n, imm)
	if h.relay != nil {
		h.relay(imm)
	}
}
func (h *traceHandler) SendComplete(wr uint64) { h.add("send wr=%d", wr) }
func (h *traceHandler) Signal(imm uint64)      { h.add("signal imm=%d", imm) }
func (h *traceHandler) Failed(err error)       { h.add("failed %v", err) }

// runScript drives a fixed sequence of calls on a Manual fabric: node 1
// sends blocks to nodes 2 and 3 on two streams each, node 2 relays what it
// gets to node 3, and the link 1-3 breaks half way. It returns the log of
// handler calls, in the order they ran.
func runScript(t *testing.T, seed int64) []string {
	f := NewMemFabric(MemOptions{Seed: seed, Manual: true})
	defer f.Close()
	var log []string
	eps := map[NodeID]Endpoint{}
	for id := NodeID(1); id <= 3; id++ {
		ep, err := f.Endpoint(id)
		must(t, err)
		eps[id] = ep
	}
	ctx := context.Background()
	open := func(from, to NodeID, s StreamID, relay func(uint64)) QueuePair {
		q, err := eps[from].Open(ctx, to, s, &traceHandler{log: &log, name: fmt.Sprintf("%d->%d/%d", from, to, s), relay: relay})
		must(t, err)
		return q
	}
	relayOut := open(2, 3, 50, nil)
	relayIn := open(3, 2, 50, nil)
	var sends []QueuePair
	for s := StreamID(1); s <= 2; s++ {
		for _, to := range []NodeID{2, 3} {
			var relay func(uint64)
			if to == 2 {
				relay = func(imm uint64) { relayOut.PostSend(make([]byte, 8), imm, imm) }
			}
			sends = append(sends, open(1, to, s, nil))
			rq := open(to, 1, s, relay)
			for i := range 10 {
				must(t, rq.PostRecv(make([]byte, 64), uint64(i)))
				must(t, relayIn.PostRecv(make([]byte, 64), uint64(i)))
			}
			must(t, rq.Signal(uint64(s)))
		}
	}
	for round := range 10 {
		for i, q := range sends {
			q.PostSend(make([]byte, 1+round+i), uint64(100*i+round), uint64(round))
		}
		if round == 5 {
			f.BreakLink(1, 3)
		}
		for range 7 {
			f.Step()
		}
	}
	f.RunUntilIdle()
	return log
}

func TestMemDeterminism(t *testing.T) {
	first := runScript(t, 42)
	if len(first) < 50 {
		t.Fatalf("script produced only %d events", len(first))
	}
	for range 3 {
		if again := runScript(t, 42); !slices.Equal(first, again) {
			t.Fatalf("same seed, different delivery order:\n%v\nvs\n%v", first, again)
		}
	}
	if other := runScript(t, 43); slices.Equal(first, other) {
		t.Fatal("different seeds gave the same order; the seed has no effect")
	}
}

func TestMemCrash(t *testing.T) {
	n := newMemNet(t, MemOptions{Seed: 7})
	a, b, c := n.endpoint(1), n.endpoint(2), n.endpoint(3)
	ab, ba := openPair(t, a, b, 1)
	cb, bc := openPair(t, c, b, 1)
	ac, ca := openPair(t, a, c, 1)
	transfer(t, ab, ba, []int{10})
	transfer(t, cb, bc, []int{10})

	n.f.Crash(2)
	ab.r.waitFailed(ErrConnectionLost)
	cb.r.waitFailed(ErrConnectionLost)
	transfer(t, ac, ca, []int{10}) // others unaffected
	if got := ba.r.count("failed") + bc.r.count("failed"); got != 0 {
		t.Errorf("the crashed node's queue pairs got %d Failed calls", got)
	}
	ctx := context.Background()
	if _, err := b.Open(ctx, 1, 2, newRecorder(t, "dead")); !errors.Is(err, ErrClosed) {
		t.Errorf("Open on a crashed node = %v, want ErrClosed", err)
	}
	r := newRecorder(t, "to dead")
	q, err := a.Open(ctx, 2, 2, r)
	must(t, err)
	r.waitFailed(ErrUnreachable)
	must(t, q.Close())

	// The node restarts under the same id.
	b2 := n.endpoint(2)
	x, y := openPair(t, a, b2, 1)
	transfer(t, x, y, []int{0, 100})
	if _, err := n.f.Endpoint(2); err == nil {
		t.Error("a second live endpoint for node 2 was allowed")
	}
}

// manualPair returns a fabric made with opts (Manual) and the two ends,
// with their recorders, of stream 1 between nodes 1 and 2.
func manualPair(t *testing.T, opts MemOptions) (f *MemFabric, qa, qb QueuePair, ra, rb *recorder) {
	f = NewMemFabric(opts)
	t.Cleanup(func() { f.Close() })
	a, _ := f.Endpoint(1)
	b, _ := f.Endpoint(2)
	ra, rb = newRecorder(t, "a"), newRecorder(t, "b")
	ctx := context.Background()
	qa, _ = a.Open(ctx, 2, 1, ra)
	qb, _ = b.Open(ctx, 1, 1, rb)
	return f, qa, qb, ra, rb
}

func TestMemBreakLinkManual(t *testing.T) {
	f, qa, qb, ra, rb := manualPair(t, MemOptions{Seed: 3, Manual: true})
	must(t, qb.PostRecv(make([]byte, 10), 1))
	must(t, qa.PostSend([]byte("x"), 0, 1))
	if len(ra.snapshot())+len(rb.snapshot()) != 0 {
		t.Fatal("Manual fabric delivered without Step")
	}
	// Frames in flight are lost with the link.
	f.BreakLink(1, 2)
	f.RunUntilIdle()
	if ra.count("failed") != 1 || rb.count("failed") != 1 || rb.count("recv") != 0 || ra.count("send") != 0 {
		t.Fatalf("after BreakLink: a %v, b %v", ra.snapshot(), rb.snapshot())
	}
	if f.Step() {
		t.Error("Step found work on an idle fabric")
	}
}

func TestMemUnknownStreamBreaksConnection(t *testing.T) {
	n := newMemNet(t, MemOptions{Seed: 1})
	a, b := n.endpoint(1), n.endpoint(2)
	pa, pb := openPair(t, a, b, 1)
	r := newRecorder(t, "one-sided")
	q, err := a.Open(context.Background(), 2, 2, r)
	must(t, err)
	// Stream 2 was never opened on b: sending on it is a protocol error
	// that takes the connection down.
	must(t, q.PostSend([]byte("x"), 0, 0))
	err = pb.r.waitFailed(ErrConnectionLost)
	if !errors.Is(err, ErrProtocol) {
		t.Errorf("receiving side got %v, want an error wrapping ErrProtocol too", err)
	}
	pa.r.waitFailed(ErrConnectionLost)
	r.waitFailed(ErrConnectionLost)
}

func TestMemPartition(t *testing.T) {
	n := newMemNet(t, MemOptions{Seed: 9})
	a, b, c := n.endpoint(1), n.endpoint(2), n.endpoint(3)
	ab, _ := openPair(t, a, b, 1)
	ac, ca := openPair(t, a, c, 1)
	n.f.Partition([]NodeID{1, 3}, []NodeID{2})
	ab.r.waitFailed(ErrConnectionLost)
	transfer(t, ac, ca, []int{10}) // the same side is unaffected
	r := newRecorder(t, "across")
	q, err := a.Open(context.Background(), 2, 2, r)
	must(t, err)
	r.waitFailed(ErrUnreachable)
	must(t, q.Close())

	n.f.Heal()
	x, y := openPair(t, a, b, 3)
	transfer(t, x, y, []int{0, 100})
}

// TestMemStepDueOnClock steps a Manual fabric on a virtual clock: a frame
// is held until its delay, drawn up to MaxDelay, has passed on that
// clock, OnWork tells of every send, and frames of one connection keep
// their order.
func TestMemStepDueOnClock(t *testing.T) {
	var now time.Time
	base := time.Unix(1000, 0)
	now = base
	kicks := 0
	f, qa, qb, _, rb := manualPair(t, MemOptions{
		Seed: 5, Manual: true, MaxDelay: 10 * time.Millisecond,
		Now: func() time.Time { return now }, OnWork: func() { kicks++ },
	})
	for i := range 3 {
		must(t, qb.PostRecv(make([]byte, 10), uint64(i)))
	}
	kicks = 0
	for i := range 3 {
		must(t, qa.PostSend([]byte{byte(i)}, uint64(i), uint64(i)))
	}
	if kicks != 3 {
		t.Errorf("OnWork was called %d times for 3 sends, want 3", kicks)
	}
	// Step through virtual time as a simulation does: whatever is due,
	// then on to when the next frame is.
	var recvAt []time.Duration
	for steps := 0; ; steps++ {
		if steps > 100 {
			t.Fatal("the fabric does not go idle")
		}
		before := rb.count("recv")
		did, wait := f.StepDue()
		if did {
			if rb.count("recv") > before {
				recvAt = append(recvAt, now.Sub(base))
			}
			continue
		}
		if wait == 0 {
			break
		}
		now = now.Add(wait)
	}
	if len(recvAt) != 3 {
		t.Fatalf("received %d frames, want 3: %v", len(recvAt), rb.snapshot())
	}
	for i, at := range recvAt {
		if at > 10*time.Millisecond || i > 0 && at < recvAt[i-1] {
			t.Errorf("frame %d received at %v (all at %v), want within 10ms and in order", i, at, recvAt)
		}
	}
	if recvAt[2] == 0 {
		t.Errorf("every frame was received at once (%v): no delay on the clock", recvAt)
	}
	var imms []uint64
	for _, e := range rb.snapshot() {
		if e.kind == "recv" {
			imms = append(imms, e.imm)
		}
	}
	if !slices.Equal(imms, []uint64{0, 1, 2}) {
		t.Errorf("received immediates %v, want [0 1 2]", imms)
	}
}
