package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// qpState is the life cycle of a queue pair: open → failed → closed, or
// open → closed. Only open queue pairs accept work.
type qpState uint8

const (
	qpOpen qpState = iota
	qpFailed
	qpClosed
)

// recvWR is one posted receive.
type recvWR struct {
	buf []byte
	wr  uint64
}

// eventKind names a handler call.
type eventKind uint8

const (
	evRecv eventKind = iota + 1
	evSend
	evSignal
	evFailed
)

// qpEvent is one handler call waiting to run.
type qpEvent struct {
	kind eventKind
	n    int
	wr   uint64
	imm  uint64
	err  error
}

// qpCore is the part of a queue pair both backends share: the state, the
// posted receives, and the serial executor that runs handler calls.
//
// Handler calls go through an event queue. Whoever pushes an event onto an
// idle queue becomes its runner and drains it (push reports this); anyone
// else only appends. Calls for one queue pair therefore run one at a time
// and in the order they were pushed, nobody ever waits for a running
// handler, and a handler may post work on any queue pair.
type qpCore struct {
	peer   NodeID
	stream StreamID
	h      Handler

	// closed is set by Close; the runner checks it before every call so
	// that no call starts after Close returns.
	closed atomic.Bool

	mu struct {
		sync.Mutex
		state qpState
		err   error        // why the queue pair failed; set with state qpFailed
		recvs ring[recvWR] // posted receives, oldest first
	}

	ev struct {
		sync.Mutex
		queue   ring[qpEvent]
		running bool // someone is draining queue
	}
	// dead is set once Failed has been called. Only the runner touches it.
	dead bool
}

func (q *qpCore) init(peer NodeID, stream StreamID, h Handler) {
	q.peer = peer
	q.stream = stream
	q.h = h
}

// Peer returns the node at the other end.
func (q *qpCore) Peer() NodeID { return q.peer }

// Stream returns the stream id.
func (q *qpCore) Stream() StreamID { return q.stream }

// PostRecv posts buf to receive the next incoming transfer.
func (q *qpCore) PostRecv(buf []byte, wr uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state != qpOpen {
		return q.stateErrLocked()
	}
	q.mu.recvs.push(recvWR{buf: buf, wr: wr})
	return nil
}

// stateErrLocked returns the error for work posted to a queue pair that is
// not open. REQUIRES: q.mu.
func (q *qpCore) stateErrLocked() error {
	if q.mu.state == qpFailed {
		return q.mu.err
	}
	return fmt.Errorf("rdma: queue pair to node %d stream %d: %w", q.peer, q.stream, ErrClosed)
}

// checkOpen returns nil if q is open and the reason it is not otherwise.
func (q *qpCore) checkOpen() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state != qpOpen {
		return q.stateErrLocked()
	}
	return nil
}

// isOpen reports whether q is open.
func (q *qpCore) isOpen() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mu.state == qpOpen
}

// takeRecv removes the oldest posted receive for an incoming transfer of n
// bytes. It fails with a reason suitable for a ProtocolError if there is no
// posted receive or it is too small, and with ok false if q is not open.
func (q *qpCore) takeRecv(n int) (rw recvWR, reason string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state != qpOpen {
		return recvWR{}, "", false
	}
	p := q.mu.recvs.peek()
	if p == nil {
		return recvWR{}, fmt.Sprintf("transfer of %d bytes with no posted receive buffer", n), true
	}
	if len(p.buf) < n {
		return recvWR{}, fmt.Sprintf("transfer of %d bytes into a posted receive buffer of %d bytes", n, len(p.buf)), true
	}
	rw, _ = q.mu.recvs.pop()
	return rw, "", true
}

// markFailed moves an open queue pair to failed with err and reports
// whether it did. The caller then pushes the Failed event.
func (q *qpCore) markFailed(err error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state != qpOpen {
		return false
	}
	q.mu.state = qpFailed
	q.mu.err = err
	q.mu.recvs.clear()
	return true
}

// markClosed moves q to closed. It reports whether q was open (false for a
// failed queue pair) and whether this call closed it (false if q was
// already closed).
func (q *qpCore) markClosed() (wasOpen, closedNow bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state == qpClosed {
		return false, false
	}
	wasOpen = q.mu.state == qpOpen
	q.mu.state = qpClosed
	q.closed.Store(true)
	q.mu.recvs.clear()
	return wasOpen, true
}

// push queues ev and reports whether the caller must now run the queue (by
// calling run, on this goroutine or another).
func (q *qpCore) push(ev qpEvent) (mustRun bool) {
	q.ev.Lock()
	defer q.ev.Unlock()
	q.ev.queue.push(ev)
	if q.ev.running {
		return false
	}
	q.ev.running = true
	return true
}

// deliver queues ev and runs the queue on this goroutine if nobody else is.
func (q *qpCore) deliver(ev qpEvent) {
	if q.push(ev) {
		q.run()
	}
}

// fail marks q failed with err and delivers Failed. It reports whether q
// was open.
func (q *qpCore) fail(err error) bool {
	if !q.markFailed(err) {
		return false
	}
	q.deliver(qpEvent{kind: evFailed, err: err})
	return true
}

// run calls the handler for every queued event until the queue is empty.
// Only the goroutine that push told to run may call it.
func (q *qpCore) run() {
	for {
		q.ev.Lock()
		ev, ok := q.ev.queue.pop()
		if !ok {
			q.ev.running = false
			q.ev.Unlock()
			return
		}
		q.ev.Unlock()
		if q.dead || q.closed.Load() {
			continue
		}
		switch ev.kind {
		case evRecv:
			q.h.RecvComplete(ev.wr, ev.n, ev.imm)
		case evSend:
			q.h.SendComplete(ev.wr)
		case evSignal:
			q.h.Signal(ev.imm)
		case evFailed:
			q.dead = true
			q.h.Failed(ev.err)
		}
	}
}

// connError is what queue pairs get when their connection breaks. It wraps
// ErrConnectionLost and the cause.
type connError struct {
	peer  NodeID
	cause error
}

func (e *connError) Error() string {
	return fmt.Sprintf("rdma: connection to node %d lost: %v", e.peer, e.cause)
}

// Unwrap returns ErrConnectionLost and the cause.
func (e *connError) Unwrap() []error { return []error{ErrConnectionLost, e.cause} }

// peerClosedError is what a queue pair gets when the peer closes its side.
func peerClosedError(peer NodeID, stream StreamID) error {
	return fmt.Errorf("rdma: node %d closed stream %d: %w", peer, stream, ErrPeerClosed)
}
