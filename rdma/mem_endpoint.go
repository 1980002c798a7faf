package rdma

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// qpKey names a queue pair within an endpoint.
type qpKey struct {
	peer   NodeID
	stream StreamID
}

// memEndpoint is a node's endpoint on a MemFabric.
type memEndpoint struct {
	f  *MemFabric
	id NodeID
	// Guarded by f.mu:
	dead bool             // closed or crashed
	qps  map[qpKey]*memQP // open queue pairs
}

// memQP is a queue pair on a MemFabric.
type memQP struct {
	qpCore
	ep   *memEndpoint
	conn *memConn // nil if the peer was unreachable at Open
	side int      // this node's side of conn
}

var _ Endpoint = (*memEndpoint)(nil)

// ID returns this node's id.
func (e *memEndpoint) ID() NodeID { return e.id }

// Open opens the queue pair for stream to peer. If peer has no live
// endpoint on the fabric, the queue pair fails with ErrUnreachable.
func (e *memEndpoint) Open(ctx context.Context, peer NodeID, stream StreamID, h Handler) (QueuePair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("rdma: Open with a nil handler")
	}
	if peer == e.id {
		return nil, fmt.Errorf("rdma: node %d cannot open a queue pair to itself", peer)
	}
	f := e.f
	f.mu.Lock()
	defer f.kick()
	defer f.mu.Unlock()
	if e.dead || f.mu.closed {
		return nil, fmt.Errorf("rdma: endpoint %d: %w", e.id, ErrClosed)
	}
	key := qpKey{peer: peer, stream: stream}
	if e.qps[key] != nil {
		return nil, fmt.Errorf("rdma: node %d stream %d: %w", peer, stream, ErrStreamInUse)
	}
	q := &memQP{ep: e}
	q.init(peer, stream, h)
	pe := f.mu.nodes[peer]
	if cut := f.mu.cut[makePair(e.id, peer)]; pe == nil || pe.dead || cut {
		err := fmt.Errorf("rdma: node %d has no live endpoint: %w", peer, ErrUnreachable)
		if cut {
			err = fmt.Errorf("rdma: node %d is on the other side of a partition: %w", peer, ErrUnreachable)
		}
		q.markFailed(err)
		f.pushLocked(q, qpEvent{kind: evFailed, err: err})
		return q, nil
	}
	e.qps[key] = q
	c := f.connLocked(e.id, peer)
	q.conn = c
	q.side = c.sideOf(e.id)
	s := &c.sides[q.side]
	s.streams[stream] = q
	s.recent.remove(stream)
	for _, imm := range s.pending.take(stream) {
		f.pushLocked(q, qpEvent{kind: evSignal, imm: imm})
	}
	return q, nil
}

// Close closes the endpoint: its connections break and its queue pairs
// close without further handler calls.
func (e *memEndpoint) Close() error {
	f := e.f
	f.mu.Lock()
	if !e.dead {
		f.killLocked(e, "closed")
	}
	f.mu.Unlock()
	f.kick()
	return nil
}

// sortedQPs returns e's open queue pairs in a fixed order. REQUIRES: f.mu.
func (e *memEndpoint) sortedQPs() []*memQP {
	qs := make([]*memQP, 0, len(e.qps))
	for _, q := range e.qps {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *memQP) int {
		if c := cmp.Compare(a.peer, b.peer); c != 0 {
			return c
		}
		return cmp.Compare(a.stream, b.stream)
	})
	return qs
}

// detachLocked forgets q in its endpoint and connection, and remembers its
// stream as recently closed so that late frames are dropped.
// REQUIRES: f.mu.
func (q *memQP) detachLocked() {
	key := qpKey{peer: q.peer, stream: q.stream}
	if q.ep.qps[key] == q {
		delete(q.ep.qps, key)
	}
	if q.conn == nil {
		return
	}
	s := &q.conn.sides[q.side]
	if s.streams[q.stream] == q {
		delete(s.streams, q.stream)
		s.recent.add(q.stream)
	}
}

// PostSend queues buf for transfer.
func (q *memQP) PostSend(buf []byte, imm uint64, wr uint64) error {
	return q.send(memFrame{typ: frameData, stream: q.stream, imm: imm, payload: buf, src: q, wr: wr})
}

// Signal queues a zero-length message carrying imm.
func (q *memQP) Signal(imm uint64) error {
	return q.send(memFrame{typ: frameSignal, stream: q.stream, imm: imm, src: q})
}

func (q *memQP) send(fr memFrame) error {
	f := q.ep.f
	f.mu.Lock()
	if err := q.checkOpen(); err != nil {
		f.mu.Unlock()
		return err
	}
	f.sendLocked(q.conn, q.side, fr)
	f.mu.Unlock()
	f.kick()
	return nil
}

// Close closes the queue pair and tells the peer.
func (q *memQP) Close() error {
	f := q.ep.f
	f.mu.Lock()
	wasOpen, _ := q.markClosed()
	if wasOpen {
		q.detachLocked()
		if q.conn != nil && !q.conn.broken {
			f.sendLocked(q.conn, q.side, memFrame{typ: frameClose, stream: q.stream})
		}
	}
	f.mu.Unlock()
	f.kick()
	return nil
}
