// Package rdmacount wraps an rdma.Endpoint to count the bytes its queue
// pairs send and receive, per stream: what a member's links carry, to
// compare the traffic of different ways of reaching the same receivers.
// Bytes are counted as the transport's users post and receive them
// (transfers' payloads), without the transport's own framing.
package rdmacount

import (
	"context"
	"sync"

	"github.com/convoy-gcs/convoy/rdma"
)

// Endpoint is an rdma.Endpoint that counts its traffic. Its methods are
// safe for concurrent use.
type Endpoint struct {
	rdma.Endpoint
	mu struct {
		sync.Mutex
		sent, recv map[rdma.StreamID]int64
	}
}

// Wrap returns ep counting its traffic.
func Wrap(ep rdma.Endpoint) *Endpoint {
	e := &Endpoint{Endpoint: ep}
	e.mu.sent = make(map[rdma.StreamID]int64)
	e.mu.recv = make(map[rdma.StreamID]int64)
	return e
}

// Open opens a queue pair whose transfers are counted.
func (e *Endpoint) Open(ctx context.Context, peer rdma.NodeID, stream rdma.StreamID, h rdma.Handler) (rdma.QueuePair, error) {
	qp, err := e.Endpoint.Open(ctx, peer, stream, &handler{Handler: h, e: e, stream: stream})
	if err != nil {
		return nil, err
	}
	return &queuePair{QueuePair: qp, e: e}, nil
}

// Totals returns the bytes sent and received on the streams for which
// match holds (every stream if match is nil).
func (e *Endpoint) Totals(match func(rdma.StreamID) bool) (sent, recv int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s, n := range e.mu.sent {
		if match == nil || match(s) {
			sent += n
		}
	}
	for s, n := range e.mu.recv {
		if match == nil || match(s) {
			recv += n
		}
	}
	return sent, recv
}

// Reset sets every count to zero.
func (e *Endpoint) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.mu.sent)
	clear(e.mu.recv)
}

func (e *Endpoint) add(m map[rdma.StreamID]int64, s rdma.StreamID, n int) {
	e.mu.Lock()
	m[s] += int64(n)
	e.mu.Unlock()
}

type handler struct {
	rdma.Handler
	e      *Endpoint
	stream rdma.StreamID
}

func (h *handler) RecvComplete(wr uint64, n int, imm uint64) {
	h.e.add(h.e.mu.recv, h.stream, n)
	h.Handler.RecvComplete(wr, n, imm)
}

type queuePair struct {
	rdma.QueuePair
	e *Endpoint
}

func (q *queuePair) PostSend(buf []byte, imm uint64, wr uint64) error {
	if err := q.QueuePair.PostSend(buf, imm, wr); err != nil {
		return err
	}
	q.e.add(q.e.mu.sent, q.QueuePair.Stream(), len(buf))
	return nil
}
