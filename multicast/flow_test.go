package multicast

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/convoy-gcs/convoy/rdma"
)

// TestGroupFlowControl runs every algorithm over groups of 2 to 17 members
// on a manually stepped fabric and checks, at every block send and every
// ready-for-block signal, the flow control rules of large.go:
//
//   - a member's block sends in flight all go to one peer, and its
//     announced block receives all come from one peer, so that transfers
//     with different peers never split its link;
//   - when a member announces a receive from a peer, it has no block
//     queued for that peer at the same or a later step, which the signal
//     would have to wait behind.
//
// Breaking them slowed the binomial pipeline on shaped links: a relay
// received blocks from several neighbours at once, so that the one it had
// to pass on next arrived late, and its ready-for-block signals waited
// behind whole blocks.
func TestGroupFlowControl(t *testing.T) {
	const (
		block = 256
		k     = 9 // blocks per message
		msgs  = 3
	)
	for _, alg := range schedAlgorithms {
		for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17} {
			for seed := range int64(3) {
				t.Run(fmt.Sprintf("%v/n=%d/seed=%d", alg, n, seed), func(t *testing.T) {
					fab := rdma.NewMemFabric(rdma.MemOptions{Seed: seed, Manual: true})
					defer fab.Close()
					ids := make([]rdma.NodeID, n)
					for i := range ids {
						ids[i] = rdma.NodeID(i + 1)
					}
					cfg := GroupConfig{ID: 3, Members: ids, Root: ids[0], Algorithm: alg, BlockBytes: block, SmallThreshold: -1}
					w := newFlowWatch(t, alg, ids, streamID(cfg.ID, chanBlocks), k)
					var eps []rdma.Endpoint
					for _, id := range ids {
						ep, err := fab.Endpoint(id)
						if err != nil {
							t.Fatal(err)
						}
						defer ep.Close()
						eps = append(eps, ep)
					}
					var groups []*Group
					var members []*member
					for _, ep := range eps {
						m := newMember()
						g, err := NewGroup(context.Background(), w.endpoint(ep), cfg, m.callbacks())
						if err != nil {
							t.Fatal(err)
						}
						groups = append(groups, g)
						members = append(members, m)
					}
					defer closeAll(groups)
					var want [][]byte
					for i := range msgs {
						msg := payload(uint64(i), k*block-i) // the last block is short
						want = append(want, msg)
						if err := groups[0].Send(context.Background(), msg); err != nil {
							t.Fatal(err)
						}
						fab.Step()
					}
					fab.RunUntilIdle()
					w.report()
					checkSame(t, members, want)
				})
			}
		}
	}
}

// flowWatch wraps the endpoints of one group's members and checks the flow
// control rules on its blocks stream as the members post work.
type flowWatch struct {
	t      *testing.T
	stream rdma.StreamID
	rank   map[rdma.NodeID]int
	// sendStep and recvStep give the step of every transfer of a k-block
	// message: sendStep[from][to][block], recvStep[to][from][block].
	sendStep, recvStep []map[int]map[int]int
	first              []int // rank → the block of its first receive

	mu     sync.Mutex
	nodes  []*flowNode
	errors []string
}

// flowNode is what one member has in flight on the blocks stream.
type flowNode struct {
	sends  []flowOp // posted and not completed, oldest first
	posted []flowOp // receives posted and not yet announced
	recvs  []flowOp // receives announced and not completed, oldest first
}

type flowOp struct{ peer, step int }

func newFlowWatch(t *testing.T, alg Algorithm, ids []rdma.NodeID, stream rdma.StreamID, k int) *flowWatch {
	w := &flowWatch{t: t, stream: stream, rank: make(map[rdma.NodeID]int)}
	for r, id := range ids {
		w.rank[id] = r
		w.nodes = append(w.nodes, &flowNode{})
		w.sendStep = append(w.sendStep, map[int]map[int]int{})
		w.recvStep = append(w.recvStep, map[int]map[int]int{})
	}
	w.first = make([]int, len(ids))
	for r, s := range schedAll(t, alg, len(ids)) {
		sends, recvs := s.plan(k, nil, nil)
		for _, o := range sends {
			if w.sendStep[r][o.peer] == nil {
				w.sendStep[r][o.peer] = map[int]int{}
			}
			w.sendStep[r][o.peer][o.block] = o.step
		}
		for i, o := range recvs {
			if w.recvStep[r][o.peer] == nil {
				w.recvStep[r][o.peer] = map[int]int{}
			}
			w.recvStep[r][o.peer][o.block] = o.step
			if i == 0 {
				w.first[r] = o.block
			}
		}
	}
	return w
}

func (w *flowWatch) errorf(format string, args ...any) {
	if len(w.errors) < 10 {
		w.errors = append(w.errors, fmt.Sprintf(format, args...))
	}
}

// report fails the test with the violations seen.
func (w *flowWatch) report() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.errors {
		w.t.Error(e)
	}
}

func (w *flowWatch) endpoint(ep rdma.Endpoint) rdma.Endpoint {
	return &flowEndpoint{Endpoint: ep, w: w}
}

type flowEndpoint struct {
	rdma.Endpoint
	w *flowWatch
}

func (e *flowEndpoint) Open(ctx context.Context, peer rdma.NodeID, stream rdma.StreamID, h rdma.Handler) (rdma.QueuePair, error) {
	if stream != e.w.stream {
		return e.Endpoint.Open(ctx, peer, stream, h)
	}
	q := &flowQP{w: e.w, self: e.w.rank[e.ID()], peer: e.w.rank[peer]}
	q.h = h
	qp, err := e.Endpoint.Open(ctx, peer, stream, &flowHandler{q: q})
	q.QueuePair = qp
	return q, err
}

// flowQP watches the work one member posts to one peer.
type flowQP struct {
	rdma.QueuePair
	w          *flowWatch
	h          rdma.Handler
	self, peer int // ranks
}

func (q *flowQP) PostSend(buf []byte, imm uint64, wr uint64) error {
	w := q.w
	w.mu.Lock()
	nd := w.nodes[q.self]
	step, ok := w.sendStep[q.self][q.peer][int(wr)]
	if !ok {
		w.errorf("rank %d sends block %d to rank %d, not in its plan", q.self, wr, q.peer)
	}
	for _, o := range nd.sends {
		if o.peer != q.peer {
			w.errorf("rank %d sends step %d to rank %d while its step %d send to rank %d is in flight", q.self, step, q.peer, o.step, o.peer)
		}
	}
	nd.sends = append(nd.sends, flowOp{q.peer, step})
	w.mu.Unlock()
	return q.QueuePair.PostSend(buf, imm, wr)
}

func (q *flowQP) PostRecv(buf []byte, wr uint64) error {
	w := q.w
	w.mu.Lock()
	b := int(wr)
	if wr == wrFirst {
		b = w.first[q.self]
	}
	step, ok := w.recvStep[q.self][q.peer][b]
	if !ok {
		w.errorf("rank %d posts a receive of block %d from rank %d, not in its plan", q.self, b, q.peer)
	}
	w.nodes[q.self].posted = append(w.nodes[q.self].posted, flowOp{q.peer, step})
	w.mu.Unlock()
	return q.QueuePair.PostRecv(buf, wr)
}

// Signal is the ready-for-block notice of the receive just posted.
func (q *flowQP) Signal(imm uint64) error {
	w := q.w
	w.mu.Lock()
	nd := w.nodes[q.self]
	i := slices.IndexFunc(nd.posted, func(o flowOp) bool { return o.peer == q.peer })
	if i < 0 {
		w.errorf("rank %d signals rank %d with no receive posted", q.self, q.peer)
	} else {
		r := nd.posted[i]
		nd.posted = slices.Delete(nd.posted, i, i+1)
		for _, o := range nd.recvs {
			if o.peer != q.peer {
				w.errorf("rank %d announces its step %d receive from rank %d while its step %d receive from rank %d is in flight", q.self, r.step, q.peer, o.step, o.peer)
			}
		}
		for _, o := range nd.sends {
			if o.peer == q.peer && o.step >= r.step {
				w.errorf("rank %d announces its step %d receive from rank %d behind its step %d send to it", q.self, r.step, q.peer, o.step)
			}
		}
		nd.recvs = append(nd.recvs, r)
	}
	w.mu.Unlock()
	return q.QueuePair.Signal(imm)
}

// flowHandler removes completed transfers from the watch.
type flowHandler struct{ q *flowQP }

func (h *flowHandler) RecvComplete(wr uint64, n int, imm uint64) {
	q := h.q
	q.w.mu.Lock()
	nd := q.w.nodes[q.self]
	if i := slices.IndexFunc(nd.recvs, func(o flowOp) bool { return o.peer == q.peer }); i >= 0 {
		nd.recvs = slices.Delete(nd.recvs, i, i+1)
	}
	q.w.mu.Unlock()
	q.h.RecvComplete(wr, n, imm)
}

func (h *flowHandler) SendComplete(wr uint64) {
	q := h.q
	q.w.mu.Lock()
	nd := q.w.nodes[q.self]
	if i := slices.IndexFunc(nd.sends, func(o flowOp) bool { return o.peer == q.peer }); i >= 0 {
		nd.sends = slices.Delete(nd.sends, i, i+1)
	}
	q.w.mu.Unlock()
	q.h.SendComplete(wr)
}

func (h *flowHandler) Signal(imm uint64) { h.q.h.Signal(imm) }
func (h *flowHandler) Failed(err error)  { h.q.h.Failed(err) }
