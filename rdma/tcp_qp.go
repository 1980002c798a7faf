package rdma

import (
	"fmt"
	"sync"
)

// tcpQP is a queue pair of the tcp backend.
type tcpQP struct {
	qpCore
	c          *tcpConn // set by addStream before the queue pair is visible
	maxPayload int
	// fillMu is held by the reader while it copies a transfer into one of
	// this queue pair's buffers; Close takes it so that no buffer is
	// written after Close returns.
	fillMu sync.Mutex
}

// PostSend queues buf for transfer with immediate value imm.
func (q *tcpQP) PostSend(buf []byte, imm uint64, wr uint64) error {
	if len(buf) > q.maxPayload {
		return fmt.Errorf("rdma: send of %d bytes exceeds the largest transfer of %d bytes", len(buf), q.maxPayload)
	}
	return q.send(outFrame{
		hdr:     frameHeader{typ: frameData, length: uint32(len(buf)), stream: q.stream, imm: imm},
		payload: buf,
		q:       q,
		wr:      wr,
	})
}

// Signal queues a zero-length message carrying imm.
func (q *tcpQP) Signal(imm uint64) error {
	return q.send(outFrame{hdr: frameHeader{typ: frameSignal, stream: q.stream, imm: imm}, q: q})
}

func (q *tcpQP) send(fr outFrame) error {
	// Holding q.mu while queuing makes the check and the queuing atomic
	// with respect to Close, which drops the frames of a closed queue pair.
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state != qpOpen {
		return q.stateErrLocked()
	}
	q.c.enqueue(fr)
	return nil
}

// Close closes the queue pair and tells the peer. Sends not yet handed to
// the socket are dropped. If a transfer is being copied into one of the
// queue pair's buffers, Close waits for the copy to reach a chunk boundary.
func (q *tcpQP) Close() error {
	wasOpen, closedNow := q.markClosed()
	if wasOpen {
		q.c.dropStream(q)
		q.c.enqueue(outFrame{hdr: frameHeader{typ: frameClose, stream: q.stream}})
	}
	if closedNow {
		// Wait for a copy into this queue pair's buffers to finish.
		q.fillMu.Lock()
		//lint:ignore SA2001 the empty critical section is the wait
		q.fillMu.Unlock()
	}
	return nil
}
