package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// errConnBroken tells Open to replace a connection that broke meanwhile.
var errConnBroken = errors.New("rdma: connection broken")

// connState is the life cycle of a tcpConn: pending (dialing, or waiting
// to be dialed) → up → broken, or pending → broken.
type connState uint8

const (
	connPending connState = iota
	connUp
	connBroken
)

// outFrame is a frame waiting for the writer.
type outFrame struct {
	hdr     frameHeader
	payload []byte
	q       *tcpQP // sender; nil for close-stream frames
	wr      uint64 // send work request, for data frames
}

// tcpConn is the connection to one peer, shared by every queue pair to it.
// It exists before the socket does, so that queue pairs can queue frames
// while the connection is set up; a broken tcpConn is never reused.
type tcpConn struct {
	ep   *TCPEndpoint
	peer NodeID
	log  *slog.Logger
	wake chan struct{} // capacity 1: frames were queued
	done chan struct{} // closed when the connection breaks

	mu struct {
		sync.Mutex
		state   connState
		nc      net.Conn            // set when up
		addr    string              // the address dialed, once up; "" for a connection the peer made
		streams map[StreamID]*tcpQP // open queue pairs
		recent  recentSet           // streams closed here; late frames are dropped
		pending pendingSignals      // signals for streams not open here yet
		out     ring[outFrame]      // frames for the writer, in order
		timer   *time.Timer         // while pending on the waiting side
	}
}

func newTCPConn(e *TCPEndpoint, peer NodeID) *tcpConn {
	c := &tcpConn{
		ep:   e,
		peer: peer,
		log:  e.log.With("peer", peer),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	c.mu.streams = make(map[StreamID]*tcpQP)
	return c
}

// addStream registers q, hands it the signals that arrived for its stream
// before it was opened, and reports whether q's event queue must be run.
func (c *tcpConn) addStream(q *tcpQP) (mustRun bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state == connBroken {
		return false, errConnBroken
	}
	if c.mu.streams[q.stream] != nil {
		return false, fmt.Errorf("rdma: node %d stream %d: %w", q.peer, q.stream, ErrStreamInUse)
	}
	q.c = c
	c.mu.streams[q.stream] = q
	c.mu.recent.remove(q.stream)
	for _, imm := range c.mu.pending.take(q.stream) {
		if q.push(qpEvent{kind: evSignal, imm: imm}) {
			mustRun = true
		}
	}
	return mustRun, nil
}

// dropStream forgets q, which failed or was closed: frames it queued are
// dropped, and frames still arriving for its stream will be.
func (c *tcpConn) dropStream(q *tcpQP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.streams[q.stream] == q {
		delete(c.mu.streams, q.stream)
		c.mu.recent.add(q.stream)
	}
	c.mu.out.filter(func(fr *outFrame) bool { return fr.q != q })
}

// failStream fails q alone with err; the connection stays up.
func (c *tcpConn) failStream(q *tcpQP, err error) {
	if !q.markFailed(err) {
		return
	}
	c.dropStream(q)
	q.deliver(qpEvent{kind: evFailed, err: err})
}

// enqueue queues fr for the writer. A broken connection drops it: its
// queue pairs are failing.
func (c *tcpConn) enqueue(fr outFrame) {
	c.mu.Lock()
	if c.mu.state == connBroken {
		c.mu.Unlock()
		return
	}
	c.mu.out.push(fr)
	up := c.mu.state == connUp
	c.mu.Unlock()
	if up {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// awaitInbound starts the wait for the peer to dial.
func (c *tcpConn) awaitInbound() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != connPending {
		return
	}
	timeout := c.ep.cfg.DialTimeout
	c.mu.timer = time.AfterFunc(timeout, func() {
		if !c.ep.track() {
			return
		}
		defer c.ep.wg.Done()
		c.giveUp(fmt.Errorf("no connection from the peer within %v", timeout))
	})
}

// dial connects to the peer. It runs on its own goroutine.
func (c *tcpConn) dial() {
	e := c.ep
	defer e.wg.Done()
	nc, addr, err := e.dialPeer(c.peer)
	if err != nil {
		c.giveUp(err)
		return
	}
	e.mu.Lock()
	ok := !e.mu.closed && c.attach(nc)
	if ok {
		c.mu.Lock()
		c.mu.addr = addr
		c.mu.Unlock()
	}
	e.mu.Unlock()
	if !ok {
		nc.Close()
	}
}

// dialedElsewhere reports whether c is a connection this node dialed
// to another address than addr.
func (c *tcpConn) dialedElsewhere(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.addr != "" && c.mu.addr != addr
}

// giveUp fails a pending connection: the peer is unreachable.
func (c *tcpConn) giveUp(cause error) {
	c.mu.Lock()
	pending := c.mu.state == connPending
	c.mu.Unlock()
	if !pending {
		return
	}
	err := fmt.Errorf("rdma: cannot connect to node %d: %w: %w", c.peer, ErrUnreachable, cause)
	c.shutdown(err, err)
}

// attach makes c, if pending, use the established connection nc, and
// starts its reader and writer. REQUIRES: c.ep.mu, endpoint not closed.
func (c *tcpConn) attach(nc net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != connPending {
		return false
	}
	c.mu.state = connUp
	c.mu.nc = nc
	if c.mu.timer != nil {
		c.mu.timer.Stop()
		c.mu.timer = nil
	}
	c.ep.wg.Add(2)
	go c.readLoop(nc)
	go c.writeLoop(nc)
	if c.mu.out.len() > 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.ep.metrics.add(c.ep.metrics.connsOpened, 1)
	c.log.Debug("rdma: connection up", "local", nc.LocalAddr(), "remote", nc.RemoteAddr())
	return true
}

// shutdown breaks c. Every queue pair on it fails with qpErr or, if qpErr
// is nil (the endpoint is closing), is closed without a handler call. If
// report is not nil the break is logged and reported to OnConnError.
func (c *tcpConn) shutdown(qpErr, report error) {
	if c.ep.ctx.Err() != nil {
		// The endpoint is closing: whatever broke, it is not news.
		qpErr, report = nil, nil
	}
	c.mu.Lock()
	if c.mu.state == connBroken {
		c.mu.Unlock()
		return
	}
	c.mu.state = connBroken
	nc := c.mu.nc
	qs := make([]*tcpQP, 0, len(c.mu.streams))
	for _, q := range c.mu.streams {
		qs = append(qs, q)
	}
	clear(c.mu.streams)
	c.mu.out.clear()
	if c.mu.timer != nil {
		c.mu.timer.Stop()
		c.mu.timer = nil
	}
	c.mu.Unlock()

	close(c.done)
	c.ep.forget(c)
	if nc != nil {
		nc.Close()
	}
	for _, q := range qs {
		if qpErr == nil {
			q.markClosed()
		} else {
			q.fail(qpErr)
		}
	}
	if report != nil {
		c.ep.reportConnError(c.peer, report)
	}
}
