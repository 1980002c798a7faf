//go:build fabric

package rdma

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// fabQP is a queue pair of the fabric backend.
//
// Its transfers travel on its own data endpoint, whose receive queue holds
// the buffers PostRecv posted, in order, each behind a header slot; its
// signals, and the credits and notices of the flow control below, travel
// on the peer's control connection. Every signal and transfer carries a
// sequence number in the stream, and the receiver delivers them in that
// order, so that the queue pair is one ordered stream although it uses two
// connections (the RDMC paper's suggestion for fabrics without tagged
// receives: receive queues set aside for control, with the data's own
// information gathered next to it).
//
// Flow control: a receive buffer that enters the receive queue is
// announced to the sender with a credit naming its length, and the sender
// sends a transfer only against a credit, so that a transfer always finds
// its buffer (on RDMA hardware one that found none would be retried by the
// NIC, or break the connection). A transfer with no credit to go out on,
// or bigger than its credited buffer, is announced with a notice instead;
// the receiver checks the notice at the transfer's place in the stream,
// exactly when the tcp backend would check the transfer itself: with no
// buffer posted by then, or one too small, the queue pair fails with a
// *ProtocolError (and a notice of a transfer whose credit was merely in
// flight is ignored).
type fabQP struct {
	qpCore
	e    *FabricEndpoint
	c    *fabConn // set by addStream before the queue pair is visible
	inst uint64   // this side's open instance of the stream, set by addStream
	// cpaired is set, under c.mu, once c paired q with a peer instance:
	// pairLocked follows under q.mu.
	cpaired bool

	// The fields below are guarded by qpCore.mu (q.mu).

	cqReserved bool // q holds its share of the completion queue
	closeSent  bool // the close record for this instance was queued
	// lost is set when the data connection failed under the open queue
	// pair: q waits for the peer's close record to learn why (lostCause
	// is this side's view).
	lost      bool
	lostCause error
	paired    bool     // q is paired with the peer's instance peerInst
	peerInst  uint64   // the peer's open instance
	fep       *fep     // the data endpoint, once connecting
	heldReq   fiInfo   // a data connection request waiting for pairing
	heldHello fabHello // its hello

	// Receiving. Invariants: delivered ≤ posted; posted - delivered =
	// len(heldData) + len(rq) + len(waiting).
	posted    int             // buffers PostRecv accepted
	delivered int             // RecvComplete calls queued
	waiting   ring[fabRecv]   // posted, not yet in the receive queue
	rq        ring[fabRecv]   // in the receive queue, oldest first
	recvSeq   uint64          // sequence number of the next event to deliver
	heldData  ring[fabData]   // transfers received ahead of recvSeq
	heldSig   ring[fabSig]    // signals received ahead of recvSeq
	notices   ring[fabNotice] // notices to check at their place

	// Sending. Transfers leave in sequence order: sendq holds those not
	// yet handed to the data endpoint, inflight those handed (or dropped)
	// and not yet completed, in order.
	sendSeq    uint64
	credits    ring[int] // lengths of the peer's announced buffers, oldest first
	sendq      ring[fabSend]
	inflight   ring[fabSend]
	noticed    bool   // a notice went out for the transfer noticedSeq
	noticedSeq uint64 //
	poisoned   bool   // a transfer was too big for its buffer: the peer failed the stream
}

// fabRecv is a posted receive.
type fabRecv struct {
	buf  []byte
	wr   uint64
	reg  *regEntry
	slot int // in the receive queue
}

// fabSend is a posted send.
type fabSend struct {
	buf  []byte
	imm  uint64
	wr   uint64
	seq  uint64
	reg  *regEntry
	slot int  // its send slot, or -1 if it was dropped
	done bool // completed or dropped
}

// fabData is a transfer received ahead of its turn.
type fabData struct {
	seq, wr, imm uint64
	n            int
}

// fabSig is a signal received ahead of its turn (or before Open).
type fabSig struct{ seq, imm uint64 }

// fabNotice is a notice of a transfer without a credit.
type fabNotice struct{ seq, n uint64 }

var _ QueuePair = (*fabQP)(nil)

// The data header (see fabric_wire.go): dataSeqLen bytes without the
// immediate value, dataHeaderLen with it.
const (
	dataSeqLen    = 8
	dataHeaderLen = 16
)

// maxCredits bounds the credits a peer may grant and the sender hold: a
// peer's receive queue may be deeper than this node's, but not deeper
// than any provider's.
const maxCredits = 1 << 16

// openLocked reports whether q is open. REQUIRES: q.mu.
func (q *fabQP) openLocked() bool { return q.mu.state == qpOpen }

// PostRecv posts buf to receive the next incoming transfer.
func (q *fabQP) PostRecv(buf []byte, wr uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.openLocked() {
		return q.stateErrLocked()
	}
	reg, err := q.e.regs.acquire(buf)
	if err != nil {
		return fmt.Errorf("rdma: registering a receive buffer: %w", err)
	}
	q.posted++
	q.waiting.push(fabRecv{buf: buf, wr: wr, reg: reg})
	q.fillLocked(false)
	return nil
}

// PostSend queues buf for transfer with immediate value imm.
func (q *fabQP) PostSend(buf []byte, imm uint64, wr uint64) error {
	if len(buf) > q.e.maxTransfer {
		return fmt.Errorf("rdma: send of %d bytes exceeds the largest transfer of %d bytes", len(buf), q.e.maxTransfer)
	}
	q.mu.Lock()
	if !q.openLocked() {
		err := q.stateErrLocked()
		q.mu.Unlock()
		return err
	}
	reg, err := q.e.regs.acquire(buf)
	if err != nil {
		q.mu.Unlock()
		return fmt.Errorf("rdma: registering a send buffer: %w", err)
	}
	q.sendq.push(fabSend{buf: buf, imm: imm, wr: wr, seq: q.sendSeq, reg: reg, slot: -1})
	q.sendSeq++
	mustRun := q.pumpLocked()
	q.mu.Unlock()
	if mustRun {
		q.e.goRun(q)
	}
	return nil
}

// Signal queues a zero-length message carrying imm.
func (q *fabQP) Signal(imm uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.openLocked() {
		return q.stateErrLocked()
	}
	q.sendLocked(true, ctrlRecord{typ: ctrlSignal, stream: q.stream, a: q.sendSeq, b: imm})
	q.sendSeq++
	q.e.metrics.framesSent.Add(1) // a frame of no bytes; the peer counts it when it delivers it
	return nil
}

// Close closes the queue pair and tells the peer. Sends not yet completed
// are dropped; the data endpoint is shut down, after which the provider
// no longer writes into the queue pair's receive buffers.
func (q *fabQP) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.state == qpClosed {
		return nil
	}
	wasOpen := q.openLocked()
	q.mu.state = qpClosed
	q.closed.Store(true)
	if wasOpen {
		q.teardownLocked(true)
	} else {
		q.sendCloseLocked(closeClosed)
	}
	return nil
}

// failLocked fails an open queue pair with err and queues Failed; with
// notify, the peer is told (its side fails with ErrPeerClosed). It
// reports whether the caller must run the event queue. REQUIRES: q.mu.
func (q *fabQP) failLocked(err error, notify bool) bool {
	if !q.openLocked() {
		return false
	}
	q.mu.state = qpFailed
	q.mu.err = err
	q.teardownLocked(notify)
	return q.push(qpEvent{kind: evFailed, err: err})
}

// sendLocked queues records of this instance for the peer (and with
// flush sends them), unless its close record went out: after that the
// peer knows nothing of the instance, and a queue pair that waits for the
// peer's close record (lost) sends nothing more. REQUIRES: q.mu.
func (q *fabQP) sendLocked(flush bool, recs ...ctrlRecord) {
	if !q.closeSent {
		q.c.queue(flush, recs...)
	}
}

// sendCloseLocked tells the peer that this instance is gone, once, and
// why. REQUIRES: q.mu.
func (q *fabQP) sendCloseLocked(reason uint64) {
	if !q.closeSent {
		q.closeSent = true
		q.c.sendClose(q, reason)
	}
}

// protocolFailLocked fails q for bad input from the peer. As on tcp, the
// peer is not told: its side carries on, and what it sends is dropped,
// until Close here tells it. REQUIRES: q.mu.
func (q *fabQP) protocolFailLocked(kind rejectReason, reason string) bool {
	perr := protocolError(q.peer, q.stream, kind, reason)
	q.e.metrics.reject(perr.kind)
	q.c.log.Warn("rdma: bad transfer from peer; failing its queue pair", "err", perr)
	return q.failLocked(perr, false)
}

// dataFailLocked fails q because its data endpoint could not be set up
// or used here, and tells the peer. REQUIRES: q.mu.
func (q *fabQP) dataFailLocked(cause error) bool {
	if q.openLocked() {
		q.sendCloseLocked(closeLost)
	}
	return q.failLocked(q.lostError(cause), true)
}

// lostError is the error of a queue pair whose data connection was lost.
func (q *fabQP) lostError(cause error) error {
	return &connError{peer: q.peer, cause: fmt.Errorf("stream %d: data connection: %w", q.stream, cause)}
}

// dataLostLocked handles the loss of the data connection under an open
// queue pair. The peer may have closed its side: its close record is then
// on the way on the control connection, and the connection lost here only
// shows it. So q does not fail yet: it tells the peer that it lost the
// data connection (a peer that still has the stream open fails it and
// answers with a close record) and fails when the peer's close record
// comes, with ErrPeerClosed or ErrConnectionLost as it says, or when the
// control connection breaks. REQUIRES: q.mu.
func (q *fabQP) dataLostLocked(cause error) {
	if !q.openLocked() || q.lost {
		return
	}
	q.lost, q.lostCause = true, cause
	q.c.log.Debug("rdma: data connection lost; waiting for the peer's word", "stream", q.stream, "err", cause)
	q.sendCloseLocked(closeLost)
	if q.fep != nil {
		q.fep.shutdown()
	}
}

// teardownLocked releases what an open queue pair holds as it fails or
// closes. Operations still in the data endpoint's queues give up their
// buffers as their flushed completions come in. REQUIRES: q.mu.
func (q *fabQP) teardownLocked(notify bool) {
	for r, ok := q.waiting.pop(); ok; r, ok = q.waiting.pop() {
		q.e.regs.release(r.reg)
	}
	for s, ok := q.sendq.pop(); ok; s, ok = q.sendq.pop() {
		q.e.regs.release(s.reg)
	}
	q.heldData.clear()
	q.heldSig.clear()
	q.notices.clear()
	q.credits.clear()
	if q.heldReq.p != nil {
		_ = q.e.f.reject(q.heldReq)
		q.heldReq.free()
		q.heldReq = fiInfo{}
	}
	q.c.dropStream(q)
	if notify {
		q.sendCloseLocked(closeClosed)
	}
	if q.fep != nil {
		q.fep.shutdown()
	}
	if q.cqReserved {
		q.cqReserved = false
		q.e.releaseCQ(2 * q.e.depth)
	}
}

// connBroken fails q (or, with err nil, closes it silently) because its
// connection broke.
func (q *fabQP) connBroken(err error) {
	q.mu.Lock()
	var mustRun bool
	if err == nil {
		if q.openLocked() {
			q.mu.state = qpClosed
			q.closed.Store(true)
			q.teardownLocked(false)
		}
	} else {
		mustRun = q.failLocked(err, false)
	}
	q.mu.Unlock()
	if mustRun {
		q.run()
	}
}

// apply applies a control record for q.
func (q *fabQP) apply(r ctrlRecord, pending []ctrlRecord) {
	q.mu.Lock()
	var mustRun bool
	if q.openLocked() {
		switch r.typ {
		case ctrlOpen:
			if !q.paired {
				mustRun = q.pairLocked(r.a, pending)
			}
		case ctrlPair:
			if !q.paired {
				mustRun = q.pairLocked(r.a, pending)
			}
		case ctrlClose:
			// The peer's instance is gone; so is this one, which it
			// learns from the close record.
			var err error
			switch {
			case r.b == closeClosed:
				err = peerClosedError(q.peer, q.stream)
			case q.lost:
				err = q.lostError(q.lostCause)
			default:
				err = q.lostError(errors.New("lost by the peer"))
			}
			q.sendCloseLocked(r.b)
			mustRun = q.failLocked(err, true)
		case ctrlSignal:
			if q.heldSig.len() >= maxPendingSignals {
				mustRun = q.protocolFailLocked(rejectStream, fmt.Sprintf("more than %d signals ahead of a transfer", maxPendingSignals))
				break
			}
			q.heldSig.push(fabSig{seq: r.a, imm: r.b})
			mustRun = q.drainLocked()
		case ctrlCredit:
			if q.credits.len() >= maxCredits {
				mustRun = q.protocolFailLocked(rejectMalformed, fmt.Sprintf("more than %d credits unused", maxCredits))
				break
			}
			q.credits.push(int(r.a))
			mustRun = q.pumpLocked()
		case ctrlNotice:
			q.notices.push(fabNotice{seq: r.a, n: r.b})
			mustRun = q.drainLocked()
		}
	}
	q.mu.Unlock()
	if mustRun {
		q.run()
	}
}

// pairLocked pairs q with the peer's instance peerInst, takes the records
// that came from it before, and connects or accepts the data endpoint. It
// reports whether the caller must run the event queue. REQUIRES: q.mu.
func (q *fabQP) pairLocked(peerInst uint64, pending []ctrlRecord) bool {
	q.paired = true
	q.peerInst = peerInst
	for _, r := range pending {
		switch r.typ {
		case ctrlSignal:
			q.heldSig.push(fabSig{seq: r.a, imm: r.b})
		case ctrlNotice:
			q.notices.push(fabNotice{seq: r.a, n: r.b})
		}
	}
	mustRun := q.drainLocked()
	switch {
	case q.c.lower:
		q.connectLocked()
	case q.heldReq.p != nil:
		info, h := q.heldReq, q.heldHello
		q.heldReq = fiInfo{}
		if !q.acceptLocked(info, h) {
			_ = q.e.f.reject(info)
		}
		info.free()
	}
	return mustRun
}

// connectLocked connects the data endpoint (on the node with the lower
// id). REQUIRES: q.mu.
func (q *fabQP) connectLocked() {
	if q.fep != nil || !q.openLocked() {
		return
	}
	info, gen, ok, err := q.c.peerAddr()
	if err != nil {
		q.dataFailLocked(err)
		return
	}
	if !ok {
		return
	}
	defer info.free()
	p, err := q.e.newFep(fabKindData, q.c, q, info, q.e.depth, q.e.depth, q.e.hdrLen)
	if err != nil {
		q.dataFailLocked(err)
		return
	}
	q.fep = p
	h := q.c.hello(fabKindData, gen)
	h.stream, h.connInst, h.accInst = q.stream, q.inst, q.peerInst
	var b [fabHelloLen]byte
	encodeFabHello(b[:], h)
	if err := p.ep.connect(info, b[:]); err != nil {
		q.dataFailLocked(err)
	}
}

// acceptData accepts the data connection request info with hello h if it
// is the one q expects, or holds it until the peer's open record arrives.
// It reports whether it took info (which the caller then must not free
// or reject).
func (q *fabQP) acceptData(info fiInfo, h fabHello) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.openLocked() || q.inst != h.accInst || q.fep != nil || q.heldReq.p != nil {
		return false
	}
	if !q.paired {
		q.heldReq, q.heldHello = info, h
		return true
	}
	if q.peerInst != h.connInst {
		return false
	}
	if !q.acceptLocked(info, h) {
		return false
	}
	info.free()
	return true
}

// acceptLocked accepts the data connection request info. It reports
// whether it did. REQUIRES: q.mu.
func (q *fabQP) acceptLocked(info fiInfo, h fabHello) bool {
	if q.peerInst != h.connInst {
		return false
	}
	p, err := q.e.newFep(fabKindData, q.c, q, info, q.e.depth, q.e.depth, q.e.hdrLen)
	if err != nil {
		q.c.log.Warn("rdma: cannot accept a data connection", "stream", q.stream, "err", err)
		return false
	}
	q.fep = p
	reply := q.c.hello(fabKindData, h.gen)
	reply.stream, reply.connInst, reply.accInst = q.stream, h.connInst, h.accInst
	var b [fabHelloLen]byte
	encodeFabHello(b[:], reply)
	if err := p.ep.accept(b[:]); err != nil {
		q.dataFailLocked(err)
	}
	return true
}

// dataConnected handles FI_CONNECTED for q's data endpoint p: receives go
// into its queue, and sends out.
func (q *fabQP) dataConnected(p *fep, data []byte) {
	q.mu.Lock()
	var mustRun bool
	if q.fep == p && q.openLocked() {
		if q.c.lower {
			h, err := decodeFabHello(data)
			if err != nil || h.kind != fabKindData || h.from != q.peer || h.to != q.e.cfg.ID ||
				h.stream != q.stream || h.connInst != q.inst || h.accInst != q.peerInst {
				mustRun = q.protocolFailLocked(rejectHandshake, "the answer to a data connection does not match it")
			}
		}
		if q.openLocked() {
			q.fillLocked(true)
			mustRun = q.pumpLocked() || mustRun
		}
	}
	q.mu.Unlock()
	if mustRun {
		q.run()
	}
}

// dataDown handles the failure or shutdown of q's data endpoint p.
func (q *fabQP) dataDown(p *fep, cause error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fep == p {
		q.dataLostLocked(cause)
	}
}

// fillLocked moves waiting receives into the data endpoint's receive
// queue and announces each with a credit; flush sends the credits now
// rather than with the next control packet. REQUIRES: q.mu.
func (q *fabQP) fillLocked(flush bool) {
	if q.fep == nil || q.waiting.len() == 0 {
		return
	}
	var recs []ctrlRecord
	for q.waiting.len() > 0 {
		r := q.waiting.peek()
		slot, ok, err := q.fep.postRecv(q.e.hdrLen, r.buf, r.reg.desc())
		if err != nil {
			q.dataFailLocked(err)
			return
		}
		if !ok {
			break
		}
		r.slot = slot
		q.rq.push(*r)
		q.waiting.pop()
		recs = append(recs, ctrlRecord{typ: ctrlCredit, stream: q.stream, a: uint64(len(q.rq.at(q.rq.len() - 1).buf))})
	}
	if len(recs) > 0 {
		q.sendLocked(flush, recs...)
	}
}

// pumpLocked hands queued sends to the data endpoint as credits and send
// slots allow, and reports whether the caller must run the event queue
// (for sends dropped after the peer failed the stream). REQUIRES: q.mu.
func (q *fabQP) pumpLocked() bool {
	for q.sendq.len() > 0 && q.openLocked() {
		s := q.sendq.peek()
		if q.poisoned {
			q.e.regs.release(s.reg)
			s.reg, s.done = nil, true
			q.inflight.push(*s)
			q.sendq.pop()
			continue
		}
		if q.credits.len() == 0 {
			if !q.noticed || q.noticedSeq != s.seq {
				q.noticed, q.noticedSeq = true, s.seq
				q.sendLocked(true, ctrlRecord{typ: ctrlNotice, stream: q.stream, a: s.seq, b: uint64(len(s.buf))})
			}
			break
		}
		if len(s.buf) > *q.credits.peek() {
			q.sendLocked(true, ctrlRecord{typ: ctrlNotice, stream: q.stream, a: s.seq, b: uint64(len(s.buf))})
			q.poisoned = true
			continue
		}
		if q.fep == nil {
			break
		}
		seq, imm, withData := s.seq, s.imm, q.e.immData
		slot, ok, err := q.fep.postSend(q.e.hdrLen, func(h []byte) {
			binary.BigEndian.PutUint64(h[0:8], seq)
			if !withData {
				binary.BigEndian.PutUint64(h[8:16], imm)
			}
		}, s.buf, s.reg.desc(), imm, withData)
		if err != nil {
			return q.dataFailLocked(err)
		}
		if !ok {
			break
		}
		s.slot = slot
		// Counted before the pop, which clears the element s points to.
		q.e.metrics.framesSent.Add(1)
		q.e.metrics.bytesSent.Add(int64(q.e.hdrLen + len(s.buf)))
		q.credits.pop()
		q.inflight.push(*s)
		q.sendq.pop()
	}
	return q.completeSendsLocked()
}

// completeSendsLocked queues SendComplete for the sends at the head of
// inflight that are done, in order. REQUIRES: q.mu.
func (q *fabQP) completeSendsLocked() bool {
	mustRun := false
	for q.inflight.len() > 0 && q.inflight.peek().done {
		s, _ := q.inflight.pop()
		if q.openLocked() && q.push(qpEvent{kind: evSend, wr: s.wr}) {
			mustRun = true
		}
	}
	return mustRun
}

// drainLocked delivers the received transfers and signals whose turn has
// come, and checks notices at their place. REQUIRES: q.mu.
func (q *fabQP) drainLocked() bool {
	mustRun := false
	for q.openLocked() {
		d, s, n := q.heldData.peek(), q.heldSig.peek(), q.notices.peek()
		switch {
		case d != nil && d.seq == q.recvSeq:
			if q.push(qpEvent{kind: evRecv, wr: d.wr, n: d.n, imm: d.imm}) {
				mustRun = true
			}
			q.heldData.pop()
			q.delivered++
			q.recvSeq++
		case s != nil && s.seq == q.recvSeq:
			// Every signal the queue pair takes passes here, whether it
			// came while q was paired (apply) or before (pairLocked), and
			// none that the checks refuse does: so a signal received
			// counts here, as a frame without bytes, as Signal counts
			// the signal it sends.
			q.e.metrics.framesRecv.Add(1)
			if q.push(qpEvent{kind: evSignal, imm: s.imm}) {
				mustRun = true
			}
			q.heldSig.pop()
			q.recvSeq++
		case d != nil && d.seq < q.recvSeq, s != nil && s.seq < q.recvSeq:
			return q.protocolFailLocked(rejectMalformed, "a sequence number repeated in the stream") || mustRun
		case n != nil && n.seq < q.recvSeq:
			q.notices.pop() // its transfer has come
		case n != nil && n.seq == q.recvSeq:
			nt, _ := q.notices.pop()
			// Every earlier transfer was delivered: the transfer noticed
			// goes into the oldest buffer not yet filled, if any.
			var next *fabRecv
			switch {
			case q.rq.len() > 0:
				next = q.rq.peek()
			case q.waiting.len() > 0:
				next = q.waiting.peek()
			}
			if next == nil {
				return q.protocolFailLocked(rejectReceiveBuffer, fmt.Sprintf("transfer of %d bytes with no posted receive buffer", nt.n)) || mustRun
			}
			if uint64(len(next.buf)) < nt.n {
				return q.protocolFailLocked(rejectReceiveBuffer, fmt.Sprintf("transfer of %d bytes into a posted receive buffer of %d bytes", nt.n, len(next.buf))) || mustRun
			}
		default:
			return mustRun
		}
	}
	return mustRun
}

// dataCompletion handles a completion on q's data endpoint p; hdr is the
// header of a received transfer.
func (q *fabQP) dataCompletion(p *fep, cp completion, hdr []byte) {
	q.mu.Lock()
	var mustRun bool
	if p.isRecvSlot(cp.slot) {
		mustRun = q.recvCompletionLocked(p, cp, hdr)
	} else {
		mustRun = q.sendCompletionLocked(p, cp)
	}
	q.mu.Unlock()
	if mustRun {
		q.run()
	}
}

// recvCompletionLocked handles a completed receive. REQUIRES: q.mu.
func (q *fabQP) recvCompletionLocked(p *fep, cp completion, hdr []byte) bool {
	if q.fep != p {
		return false
	}
	r, ok := q.rq.pop()
	if !ok || r.slot != cp.slot {
		// Receives complete in the order they were posted.
		return q.dataFailLocked(fmt.Errorf("receive completion for slot %d out of order", cp.slot))
	}
	q.e.regs.release(r.reg)
	if !q.openLocked() || cp.canceled() {
		return false
	}
	if cp.err != 0 {
		q.dataLostLocked(fmt.Errorf("receive: %s", cp.errText))
		return false
	}
	n := cp.n - q.e.hdrLen
	if n < 0 || n > len(r.buf) || len(hdr) < q.e.hdrLen {
		return q.protocolFailLocked(rejectReceiveBuffer, fmt.Sprintf("transfer of %d bytes into a receive of %d", cp.n, len(r.buf)+q.e.hdrLen))
	}
	d := fabData{seq: binary.BigEndian.Uint64(hdr[0:8]), wr: r.wr, n: n}
	if q.e.immData {
		if cp.flags&fiRemoteData == 0 {
			return q.protocolFailLocked(rejectMalformed, "transfer without its immediate value")
		}
		d.imm = cp.data
	} else {
		d.imm = binary.BigEndian.Uint64(hdr[8:16])
	}
	q.e.metrics.framesRecv.Add(1)
	q.e.metrics.bytesRecv.Add(int64(cp.n))
	q.heldData.push(d)
	mustRun := q.drainLocked()
	q.fillLocked(true)
	return mustRun
}

// sendCompletionLocked handles a completed send. REQUIRES: q.mu.
func (q *fabQP) sendCompletionLocked(p *fep, cp completion) bool {
	if q.fep != p {
		return false
	}
	var s *fabSend
	for i := range q.inflight.len() {
		if e := q.inflight.at(i); !e.done && e.slot == cp.slot {
			s = e
			break
		}
	}
	if s == nil {
		return q.dataFailLocked(fmt.Errorf("send completion for slot %d, which has no send", cp.slot))
	}
	q.e.regs.release(s.reg)
	s.reg, s.done = nil, true
	if cp.err != 0 && !cp.canceled() {
		q.dataLostLocked(fmt.Errorf("send: %s", cp.errText))
	}
	mustRun := q.completeSendsLocked()
	return q.pumpLocked() || mustRun
}
