//go:build fabric

package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// fabConn is the control connection to one peer and the streams opened on
// it. It exists before its endpoint does, so that queue pairs can queue
// records while the connection is set up; a broken fabConn is never
// reused.
//
// Control records travel in packets, each filling one of the peer's
// control slots. A node sends a packet only while the peer has a slot for
// it (credits), keeping the last one for a packet that carries only an
// acknowledgement of freed slots, so that two nodes out of credits can
// always tell each other about the slots they freed.
type fabConn struct {
	e     *FabricEndpoint
	peer  NodeID
	log   *slog.Logger
	lower bool // this node has the lower id: it connects

	mu struct {
		sync.Mutex
		state    connState
		gen      uint64 // the connection's generation, once connecting or accepting
		ctrl     *fep   // the control endpoint, once connecting or accepting
		peerInfo fiInfo // the peer's address (connecting side), for data endpoints
		streams  map[StreamID]*fabQP
		// peerOpen holds, for each stream, the peer's instances that it
		// has not closed yet, oldest first. Only the newest may be open
		// (the others failed there), and the peer's records for the stream
		// are the newest's.
		peerOpen map[StreamID][]*peerInst
		// pending holds the signals and notices of the peer's newest
		// instance of each stream while it is paired with no queue pair
		// here, npending their number.
		pending  map[StreamID][]ctrlRecord
		npending int
		nextInst uint64
		out      ring[outRecord] // records to send, in order
		// sent and received count the records sent to and processed from
		// the peer. An open record carries the count received, so that
		// the node with the lower id can tell whether the peer's instance
		// opened before the peer saw the close of one of its own.
		sent, received uint64
		// unpairedClose is, on the node with the lower id, the number
		// (in sent) of the close record of its latest instance of a stream
		// that closed before it paired: a peer instance that opened
		// before seeing that record fails there when it comes.
		unpairedClose map[StreamID]uint64
		credits       int           // packets the peer has slots for
		freed         uint32        // control slots freed here, not yet acknowledged
		timer         *time.Timer   // bounds connection setup
		backoff       time.Duration // before the connecting side's next attempt
		deadline      time.Time     // of the connecting side's attempts
		lastErr       error         // why the connecting side's last attempt failed
		// addr is the address this node connected to, once up; "" for a
		// connection the peer made. dialing is that of the attempt under
		// way.
		addr, dialing string
	}
}

// peerInst is one of the peer's instances of a stream. Each pairs with at
// most one queue pair here, for its whole life.
//
// The node with the lower id decides which instances pair: its open queue
// pair with the peer's newest instance that has not paired yet, as soon as
// it knows of both, and it tells the peer with a pair record. The node
// with the higher id pairs only as told. An instance closed on one side
// before the other learned of it thus pairs on both sides or on neither:
// the two never disagree about whom a close record concerns. One case
// keeps tcp's rule that a close fails whatever queue pair has the stream
// open: when the peer's newest instance closes unpaired while a queue
// pair here is open and unpaired (on the node with the higher id only),
// that queue pair fails; the node with the lower id learns it from the
// record counts in open records, and pairs nothing with it.
type peerInst struct {
	inst    uint64
	used    bool   // paired with a queue pair here
	partner *fabQP // that queue pair, while it is open here
}

// outRecord is a record waiting to be sent.
type outRecord struct {
	ctrlRecord
	unpairedClose bool // the close of an instance that never paired
}

// maxPeerInstances bounds the instances of one stream a peer may have
// opened and not closed.
const maxPeerInstances = 8

func newFabConn(e *FabricEndpoint, peer NodeID) *fabConn {
	c := &fabConn{e: e, peer: peer, log: e.log.With("peer", peer), lower: e.cfg.ID < peer}
	c.mu.streams = make(map[StreamID]*fabQP)
	c.mu.pending = make(map[StreamID][]ctrlRecord)
	c.mu.peerOpen = make(map[StreamID][]*peerInst)
	c.mu.unpairedClose = make(map[StreamID]uint64)
	e.mu.cqUsed += 2 * ctrlSlots
	return c
}

// addStream registers q and queues its open record. On the node with the
// lower id, q pairs with the peer's newest instance of the stream if it
// has not paired yet: addStream then returns it and the records that came
// from it. REQUIRES: q.mu.
func (c *fabConn) addStream(q *fabQP) (peerInst uint64, paired bool, pending []ctrlRecord, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state == connBroken {
		return 0, false, nil, errConnBroken
	}
	if c.mu.streams[q.stream] != nil {
		return 0, false, nil, fmt.Errorf("rdma: node %d stream %d: %w", q.peer, q.stream, ErrStreamInUse)
	}
	q.c = c
	c.mu.nextInst++
	q.inst = c.mu.nextInst
	c.mu.streams[q.stream] = q
	c.mu.out.push(outRecord{ctrlRecord: ctrlRecord{typ: ctrlOpen, stream: q.stream, a: q.inst, b: c.mu.received}})
	if p := c.newestLocked(q.stream); c.lower && p != nil && !p.used {
		return p.inst, true, c.pairLocked(p, q), nil
	}
	return 0, false, nil, nil
}

// pairLocked pairs the peer's instance p with q, and returns the records
// that came from p before. On the node with the lower id, it tells the
// peer. REQUIRES: c.mu.
//
// The pair record goes ahead of the records queued before it, right
// behind q's open record if that is still queued: the peer holds q's
// records until it learns the pairing, so they should not wait behind
// one another, and the peer then holds no more than were in flight.
func (c *fabConn) pairLocked(p *peerInst, q *fabQP) []ctrlRecord {
	p.used, p.partner, q.cpaired = true, q, true
	if c.lower {
		pair := outRecord{ctrlRecord: ctrlRecord{typ: ctrlPair, stream: q.stream, a: q.inst, b: p.inst}}
		queued := make([]outRecord, 0, c.mu.out.len()+1)
		at := 0
		for r, ok := c.mu.out.pop(); ok; r, ok = c.mu.out.pop() {
			queued = append(queued, r)
			if r.typ == ctrlOpen && r.stream == q.stream && r.a == q.inst {
				at = len(queued)
			}
		}
		queued = slices.Insert(queued, at, pair)
		for _, r := range queued {
			c.mu.out.push(r)
		}
	}
	return c.takePendingLocked(q.stream)
}

// newestLocked returns the peer's newest instance of s, or nil.
// REQUIRES: c.mu.
func (c *fabConn) newestLocked(s StreamID) *peerInst {
	l := c.mu.peerOpen[s]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

// takePendingLocked removes and returns the records held for s.
// REQUIRES: c.mu.
func (c *fabConn) takePendingLocked(s StreamID) []ctrlRecord {
	recs := c.mu.pending[s]
	if recs != nil {
		delete(c.mu.pending, s)
		c.mu.npending -= len(recs)
	}
	return recs
}

// dropStream forgets q, which failed or was closed: its queued records are
// dropped, and the peer's records for its instance will be.
func (c *fabConn) dropStream(q *fabQP) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.streams[q.stream] != q {
		return
	}
	delete(c.mu.streams, q.stream)
	for _, p := range c.mu.peerOpen[q.stream] {
		if p.partner == q {
			p.partner = nil
		}
	}
	c.mu.out.filter(func(r *outRecord) bool {
		return r.stream != q.stream || r.typ == ctrlOpen || r.typ == ctrlPair || r.typ == ctrlClose
	})
}

// streamFor returns the open queue pair for stream if c is up in
// generation gen.
func (c *fabConn) streamFor(gen uint64, stream StreamID) *fabQP {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != connUp || c.mu.gen != gen {
		return nil
	}
	return c.mu.streams[stream]
}

// peerAddr returns a copy of the peer's address, which the caller frees,
// and the generation, for connecting a data endpoint; ok is false unless
// c is up and this node connects. (The connection's own copy goes when it
// breaks, which may be while the caller uses it.)
func (c *fabConn) peerAddr() (info fiInfo, gen uint64, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != connUp || c.mu.peerInfo.p == nil {
		return fiInfo{}, 0, false, nil
	}
	info, err = c.mu.peerInfo.dup()
	return info, c.mu.gen, err == nil, err
}

// acceptable reports whether an inbound control connection may be
// attached to c: c is still waiting for one. REQUIRES: e.mu.
func (c *fabConn) acceptable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.state == connPending
}

// hello returns this node's hello on c.
func (c *fabConn) hello(kind fabConnKind, gen uint64) fabHello {
	return fabHello{kind: kind, immHdr: !c.e.immData, from: c.e.cfg.ID, to: c.peer, gen: gen}
}

// queue queues records; with flush, it sends what the control credits
// allow, and otherwise leaves them for the next packet (credits for
// receives posted by PostRecv wait for the ready signal that follows).
func (c *fabConn) queue(flush bool, recs ...ctrlRecord) {
	c.mu.Lock()
	if c.mu.state == connBroken {
		c.mu.Unlock()
		return
	}
	for _, r := range recs {
		c.mu.out.push(outRecord{ctrlRecord: r})
	}
	var err error
	if flush {
		err = c.flushLocked()
	}
	c.mu.Unlock()
	if err != nil {
		c.failLater(err)
	}
}

// Reasons of a close record (see fabric_wire.go).
const (
	closeClosed = 0 // the queue pair was closed, or failed
	closeLost   = 1 // its data connection was lost
)

// sendClose queues the close record of q's instance, with reason.
func (c *fabConn) sendClose(q *fabQP, reason uint64) {
	c.mu.Lock()
	if c.mu.state == connBroken {
		c.mu.Unlock()
		return
	}
	c.mu.out.push(outRecord{
		ctrlRecord:    ctrlRecord{typ: ctrlClose, stream: q.stream, a: q.inst, b: reason},
		unpairedClose: c.lower && !q.cpaired,
	})
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		c.failLater(err)
	}
}

// flush sends what the control credits allow.
func (c *fabConn) flush() {
	c.mu.Lock()
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		c.failLater(err)
	}
}

// flushLocked sends packets of queued records, and an acknowledgement of
// freed slots when enough are due, as far as credits and send slots
// allow. REQUIRES: c.mu.
func (c *fabConn) flushLocked() error {
	p := c.mu.ctrl
	if c.mu.state != connUp || p == nil {
		return nil
	}
	var recs [ctrlMaxRecords]ctrlRecord
	for {
		// Records go out while two credits are left: the last is kept
		// for a packet that only acknowledges freed slots, sent when
		// enough are free, or at once when records wait for credits
		// (the peer may be waiting for the same).
		n := 0
		switch waiting := c.mu.out.len(); {
		case waiting > 0 && c.mu.credits >= 2:
			n = min(waiting, ctrlMaxRecords)
		case c.mu.credits >= 1 && (c.mu.freed >= ctrlAckAfter || waiting > 0 && c.mu.freed > 0):
		default:
			return nil
		}
		for i := range n {
			recs[i] = c.mu.out.at(i).ctrlRecord
		}
		acks := c.mu.freed
		size := ctrlHeaderLen + n*ctrlRecordLen
		_, ok, err := p.postSend(size, func(b []byte) {
			encodeCtrlPacket(b[:ctrlSlotLen:ctrlSlotLen], acks, recs[:n])
		}, nil, nil, 0, false)
		if err != nil {
			return &connError{peer: c.peer, cause: err}
		}
		if !ok {
			return nil // a send completion flushes again
		}
		c.sentLocked(n)
		c.mu.credits--
		c.mu.freed = 0
	}
}

// sentLocked removes the first n queued records, which were sent, and
// counts them. REQUIRES: c.mu.
func (c *fabConn) sentLocked(n int) {
	for range n {
		r, _ := c.mu.out.pop()
		if r.unpairedClose {
			c.mu.unpairedClose[r.stream] = c.mu.sent
		}
		c.mu.sent++
	}
}

// failLater breaks c on a goroutine of its own: the caller may hold locks
// that breaking takes.
func (c *fabConn) failLater(err error) {
	if !c.e.track() {
		return
	}
	go func() {
		defer c.e.wg.Done()
		c.shutdown(err, err)
	}()
}

// awaitInbound starts the wait for the peer to connect.
func (c *fabConn) awaitInbound() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.state != connPending || c.mu.timer != nil {
		return
	}
	timeout := c.e.cfg.DialTimeout
	c.mu.timer = time.AfterFunc(timeout, func() {
		if !c.e.track() {
			return
		}
		defer c.e.wg.Done()
		c.giveUp(fmt.Errorf("no connection from the peer within %v", timeout))
	})
}

// dial connects to the peer, trying again until DialTimeout has passed. It
// runs on its own goroutine.
func (c *fabConn) dial() {
	defer c.e.wg.Done()
	timeout := c.e.cfg.DialTimeout
	c.mu.Lock()
	c.mu.deadline = time.Now().Add(timeout)
	c.mu.backoff = 5 * time.Millisecond
	c.mu.timer = time.AfterFunc(timeout, func() {
		if !c.e.track() {
			return
		}
		defer c.e.wg.Done()
		c.mu.Lock()
		last := c.mu.lastErr
		c.mu.Unlock()
		if last == nil {
			c.giveUp(fmt.Errorf("not connected within %v", timeout))
			return
		}
		c.giveUp(fmt.Errorf("not connected within %v (last attempt: %w)", timeout, last))
	})
	c.mu.Unlock()
	c.attempt()
}

// attempt makes one connection attempt. A failure is retried after a
// pause, until the deadline.
func (c *fabConn) attempt() {
	e := c.e
	if e.cfg.Resolve == nil {
		c.giveUp(errors.New("no Resolve function configured"))
		return
	}
	addr, err := e.cfg.Resolve(c.peer)
	if err != nil {
		c.retryLater(fmt.Errorf("resolve: %w", err))
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		c.retryLater(fmt.Errorf("address %q: %w", addr, err))
		return
	}
	info, err := getInfo(e.cfg.Provider, host, port, false, e.info.fabricName(), e.info.domainName())
	if err != nil {
		c.retryLater(fmt.Errorf("address %s: %w", addr, err))
		return
	}
	p, err := e.newFep(fabKindControl, c, nil, info, ctrlSlots, ctrlSlots, ctrlSlotLen)
	if err != nil {
		info.free()
		c.giveUp(err)
		return
	}
	gen := rand.Uint64()
	c.mu.Lock()
	if c.mu.state != connPending {
		c.mu.Unlock()
		info.free()
		p.shutdown()
		return
	}
	c.mu.peerInfo.free()
	c.mu.peerInfo = info
	c.mu.ctrl = p
	c.mu.gen = gen
	c.mu.dialing = addr
	var b [fabHelloLen]byte
	encodeFabHello(b[:], c.hello(fabKindControl, gen))
	err = p.ep.connect(info, b[:])
	c.mu.Unlock()
	if err != nil {
		c.connectFailed(p, fmt.Errorf("connect to %s: %w", addr, err))
	}
}

// retryLater schedules the next attempt, or gives up past the deadline.
func (c *fabConn) retryLater(cause error) {
	c.mu.Lock()
	if c.mu.state != connPending {
		c.mu.Unlock()
		return
	}
	c.mu.lastErr = cause
	wait := c.mu.backoff
	if time.Now().Add(wait).After(c.mu.deadline) {
		c.mu.Unlock()
		c.giveUp(cause)
		return
	}
	c.mu.backoff = min(2*wait, 200*time.Millisecond)
	c.mu.Unlock()
	c.log.Debug("rdma: connection attempt failed; trying again", "err", cause, "retry_in", wait)
	time.AfterFunc(wait, func() {
		if !c.e.track() {
			return
		}
		defer c.e.wg.Done()
		c.attempt()
	})
}

// connectFailed handles a connection attempt that failed or was refused:
// the connecting side tries again; the accepting side waits for the next.
func (c *fabConn) connectFailed(p *fep, cause error) {
	c.mu.Lock()
	current := c.mu.ctrl == p && c.mu.state == connPending
	if current {
		c.mu.ctrl = nil
	}
	c.mu.Unlock()
	p.shutdown()
	if current && c.lower {
		c.retryLater(cause)
	}
}

// dialedElsewhere reports whether c is a connection this node made to
// another address than addr.
func (c *fabConn) dialedElsewhere(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.addr != "" && c.mu.addr != addr
}

// giveUp fails a pending connection: the peer is unreachable.
func (c *fabConn) giveUp(cause error) {
	c.mu.Lock()
	pending := c.mu.state == connPending
	c.mu.Unlock()
	if !pending {
		return
	}
	err := fmt.Errorf("rdma: cannot connect to node %d: %w: %w", c.peer, ErrUnreachable, cause)
	c.shutdown(err, err)
}

// accept accepts the control connection request of info (from h.from).
func (c *fabConn) accept(info fiInfo, h fabHello) {
	if h.immHdr != !c.e.immData {
		_ = c.e.f.reject(info)
		perr := protocolError(h.from, 0, rejectHandshake, "the peer and this node disagree on where immediate values travel (one provider carries 8 bytes of completion data, the other does not)")
		c.e.reportConnError(h.from, fmt.Errorf("rdma: refused a connection: %w", perr))
		return
	}
	p, err := c.e.newFep(fabKindControl, c, nil, info, ctrlSlots, ctrlSlots, ctrlSlotLen)
	if err != nil {
		_ = c.e.f.reject(info)
		c.log.Warn("rdma: cannot accept a connection", "err", err)
		return
	}
	c.mu.Lock()
	if c.mu.state != connPending {
		c.mu.Unlock()
		p.shutdown()
		return
	}
	old := c.mu.ctrl
	c.mu.ctrl = p
	c.mu.gen = h.gen
	var b [fabHelloLen]byte
	encodeFabHello(b[:], c.hello(fabKindControl, h.gen))
	err = p.ep.accept(b[:])
	c.mu.Unlock()
	if old != nil {
		old.shutdown()
	}
	if err != nil {
		c.connectFailed(p, err)
	}
	c.awaitInbound()
}

// ctrlConnected handles FI_CONNECTED for c's control endpoint p, with the
// accepting side's hello as data on the connecting side.
func (c *fabConn) ctrlConnected(p *fep, data []byte) {
	c.mu.Lock()
	if c.mu.ctrl != p || c.mu.state != connPending {
		c.mu.Unlock()
		p.shutdown()
		return
	}
	if c.lower {
		h, err := decodeFabHello(data)
		var perr *ProtocolError
		switch {
		case err != nil:
			perr = protocolError(c.peer, 0, rejectHandshake, err.Error())
		case h.kind != fabKindControl || h.to != c.e.cfg.ID || h.gen != c.mu.gen:
			perr = protocolError(c.peer, 0, rejectHandshake, "the answer to a control connection does not match it")
		case h.from != c.peer:
			perr = protocolError(c.peer, 0, rejectIdentity, fmt.Sprintf("connected to node %d but node %d answered", c.peer, h.from))
		case h.immHdr != !c.e.immData:
			perr = protocolError(c.peer, 0, rejectHandshake, "the peer and this node disagree on where immediate values travel")
		}
		if perr != nil {
			c.mu.Unlock()
			c.shutdown(perr, perr)
			return
		}
	}
	c.mu.state = connUp
	c.mu.addr = c.mu.dialing
	c.mu.credits = ctrlSlots
	if c.mu.timer != nil {
		c.mu.timer.Stop()
		c.mu.timer = nil
	}
	var err error
	for range ctrlSlots {
		if _, _, err = p.postRecv(ctrlSlotLen, nil, nil); err != nil {
			break
		}
	}
	if err == nil {
		err = c.flushLocked()
	}
	c.mu.Unlock()
	if err != nil {
		c.shutdown(&connError{peer: c.peer, cause: err}, err)
		return
	}
	c.e.metrics.add(c.e.metrics.connsOpened, 1)
	c.log.Debug("rdma: control connection up")
}

// ctrlDown handles the failure or shutdown of c's control endpoint p.
func (c *fabConn) ctrlDown(p *fep, wasUp bool, cause error) {
	c.mu.Lock()
	current := c.mu.ctrl == p
	c.mu.Unlock()
	if !current {
		return
	}
	if !wasUp {
		c.connectFailed(p, cause)
		return
	}
	err := &connError{peer: c.peer, cause: cause}
	c.shutdown(err, err)
}

// ctrlCompletion handles a completion on c's control endpoint p.
func (c *fabConn) ctrlCompletion(p *fep, cp completion, packet []byte) {
	c.mu.Lock()
	current := c.mu.ctrl == p && c.mu.state == connUp
	c.mu.Unlock()
	if !current {
		return
	}
	if cp.err != 0 {
		if cp.canceled() {
			return
		}
		err := &connError{peer: c.peer, cause: fmt.Errorf("control transfer: %s", cp.errText)}
		c.shutdown(err, err)
		return
	}
	if !p.isRecvSlot(cp.slot) {
		c.flush()
		return
	}
	actions, err := c.receive(p, packet)
	if err != nil {
		c.shutdown(err, err)
		return
	}
	for _, a := range actions {
		a.q.apply(a.r, a.pending)
	}
}

// ctrlAction is a record for a queue pair, applied after c.mu is
// released.
type ctrlAction struct {
	q       *fabQP
	r       ctrlRecord
	pending []ctrlRecord // with a pairing: the records that came before
}

// receive decodes a control packet, updates c and reposts the slot. It
// returns the records for queue pairs, in order.
func (c *fabConn) receive(p *fep, packet []byte) ([]ctrlAction, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var actions []ctrlAction
	acks, err := decodeCtrlPacket(packet, func(r ctrlRecord) error {
		q, pending, err := c.recordLocked(r)
		if q != nil {
			actions = append(actions, ctrlAction{q, r, pending})
		}
		return err
	})
	if err != nil {
		var perr *ProtocolError
		if !errors.As(err, &perr) {
			perr = protocolError(c.peer, 0, rejectMalformed, err.Error())
		}
		return nil, perr
	}
	if c.mu.credits+int(acks) > ctrlSlots {
		return nil, protocolError(c.peer, 0, rejectMalformed, fmt.Sprintf("acknowledged %d control slots with %d of %d free", acks, c.mu.credits, ctrlSlots))
	}
	c.mu.credits += int(acks)
	if _, _, err := p.postRecv(ctrlSlotLen, nil, nil); err != nil {
		return nil, &connError{peer: c.peer, cause: err}
	}
	c.mu.freed++
	if err := c.flushLocked(); err != nil {
		return nil, err
	}
	return actions, nil
}

// recordLocked applies a record to c and returns the queue pair it is
// for, if it has one, and with a pairing the records that came before.
// REQUIRES: c.mu.
func (c *fabConn) recordLocked(r ctrlRecord) (q *fabQP, pending []ctrlRecord, err error) {
	c.mu.received++
	s := r.stream
	list := c.mu.peerOpen[s]
	find := func(inst uint64) *peerInst {
		for _, p := range list {
			if p.inst == inst {
				return p
			}
		}
		return nil
	}
	switch r.typ {
	case ctrlOpen:
		if find(r.a) != nil {
			return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("instance %d of stream %d opened twice", r.a, s))
		}
		if len(list) >= maxPeerInstances {
			return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("more than %d instances of stream %d open", maxPeerInstances, s))
		}
		p := &peerInst{inst: r.a}
		c.mu.peerOpen[s] = append(list, p)
		c.takePendingLocked(s) // an older instance's, which failed there
		if k, ok := c.mu.unpairedClose[s]; ok {
			if r.b <= k {
				// It opened before the peer saw the close of an instance
				// of this node's that never paired: that close fails it
				// there (see ctrlClose), so nothing here pairs with it.
				p.used = true
				return nil, nil, nil
			}
			delete(c.mu.unpairedClose, s)
		}
		if q := c.mu.streams[s]; c.lower && q != nil && !q.cpaired {
			return q, c.pairLocked(p, q), nil
		}
		return nil, nil, nil
	case ctrlPair:
		p := find(r.a)
		if c.lower || p == nil || p.used || p != c.newestLocked(s) {
			return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("pairing of instance %d of stream %d, which cannot pair", r.a, s))
		}
		if q := c.mu.streams[s]; q != nil && q.inst == r.b && !q.cpaired {
			return q, c.pairLocked(p, q), nil
		}
		// The queue pair it pairs with is gone here, and so are its
		// records: the peer learns of it from its close record.
		p.used = true
		c.e.metrics.add(c.e.metrics.late, int64(len(c.takePendingLocked(s))))
		return nil, nil, nil
	case ctrlClose:
		if r.b != closeClosed && r.b != closeLost {
			return nil, nil, protocolError(c.peer, s, rejectMalformed, fmt.Sprintf("close of stream %d for unknown reason %d", s, r.b))
		}
		p := find(r.a)
		if p == nil {
			return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("close of instance %d of stream %d, which is not open", r.a, s))
		}
		partner := p.partner
		if p == c.newestLocked(s) {
			c.takePendingLocked(s) // what it sent before closing is stale now
			if q := c.mu.streams[s]; !p.used && q != nil && !q.cpaired {
				// The peer's instance closed before it paired, while a
				// queue pair here was open and unpaired too: as on tcp,
				// where a close fails whatever queue pair has the stream
				// open, that queue pair fails. (Only on the node with the
				// higher id: on the other, a queue pair pairs as soon as
				// both are open.)
				partner = q
			}
		}
		if list = slices.DeleteFunc(list, func(x *peerInst) bool { return x == p }); len(list) == 0 {
			delete(c.mu.peerOpen, s)
		} else {
			c.mu.peerOpen[s] = list
		}
		return partner, nil, nil
	}
	p := c.newestLocked(s)
	switch {
	case p == nil:
		return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("%v for stream %d, which the peer never opened", r.typ, s))
	case p.partner != nil:
		return p.partner, nil, nil
	case p.used:
		c.e.metrics.add(c.e.metrics.late, 1) // for a queue pair here that is gone
		return nil, nil, nil
	case r.typ == ctrlCredit:
		return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("credit for stream %d before it paired", s))
	}
	// A signal or notice for the queue pair the instance will pair with.
	if c.mu.npending >= maxPendingSignals {
		return nil, nil, protocolError(c.peer, s, rejectStream, fmt.Sprintf("more than %d signals and notices for streams not open here", maxPendingSignals))
	}
	c.mu.pending[s] = append(c.mu.pending[s], r)
	c.mu.npending++
	return nil, nil, nil
}

// shutdown breaks c. Every queue pair on it fails with qpErr or, if qpErr
// is nil (the endpoint is closing), is closed without a handler call. If
// report is not nil the break is logged and reported to OnConnError.
func (c *fabConn) shutdown(qpErr, report error) {
	if c.e.ctx.Err() != nil {
		qpErr, report = nil, nil
	}
	c.mu.Lock()
	if c.mu.state == connBroken {
		c.mu.Unlock()
		return
	}
	c.mu.state = connBroken
	ctrl := c.mu.ctrl
	qs := make([]*fabQP, 0, len(c.mu.streams))
	for _, q := range c.mu.streams {
		qs = append(qs, q)
	}
	clear(c.mu.streams)
	clear(c.mu.pending)
	c.mu.out.clear()
	if c.mu.timer != nil {
		c.mu.timer.Stop()
		c.mu.timer = nil
	}
	c.mu.peerInfo.free()
	c.mu.peerInfo = fiInfo{}
	c.mu.Unlock()

	c.e.forget(c)
	c.e.releaseCQ(2 * ctrlSlots)
	if ctrl != nil {
		ctrl.shutdown()
	}
	for _, q := range qs {
		q.connBroken(qpErr)
	}
	if report != nil {
		c.e.reportConnError(c.peer, report)
	}
}
