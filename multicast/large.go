package multicast

import (
	"fmt"
)

const (
	// wrFirst marks the receive posted for the first block of the next
	// message (into the scratch buffer); other receives carry the block
	// number as their work request id.
	wrFirst = 1 << 62
	// recvWindow is how many block receives from one peer a member keeps
	// posted (each announced with a ready-for-block signal) beyond those
	// completed, so that the peer does not wait for the signal.
	recvWindow = 8
	// sendWindow is how many block sends to one peer a member keeps queued
	// on the transport: the schedule's one send per step, plus one so the
	// link never idles between steps.
	sendWindow = 2
)

// Flow control. A schedule gives each member at most one send and one
// receive per step (RDMC §3), and the binomial pipeline depends on the
// steps keeping pace: a relay sends at step t+1 the block it received at
// step t. The engine runs the steps asynchronously and keeps, on each of
// the member's two links, the schedule's order:
//
//   - Transfers with one peer share a connection, which carries them in
//     order. A member keeps up to sendWindow sends to, and recvWindow
//     announced receives from, the same peer in flight.
//   - Transfers with different peers would share the member's link and
//     split its bandwidth, so that the block of the earlier step, which
//     the schedule needs first, would arrive late. A send to (or receive
//     from) another peer therefore waits until the sends to (receives
//     from) the current one have completed.
//   - A ready-for-block signal travels behind the blocks this member has
//     already queued for the same peer. A member therefore queues no block
//     for a peer while it has yet to announce a receive from that peer at
//     the same or an earlier step: binomial pipeline neighbours exchange
//     blocks in the same step, and the signal, and with it the peer's
//     send, would otherwise wait for a whole block to go out.
//
// Each of these waits ends once transfers of earlier steps have completed,
// so a valid schedule (one that sends a block only after the step it
// arrives in) cannot deadlock.

// largeState is the progress of the one large message this member is
// working on, and the root's queue of large messages. Members handle large
// messages strictly one after another; the group as a whole pipelines them
// because members finish at different times.
type largeState struct {
	scratch []byte // receivers: buffer for the first block of the next message
	active  bool
	size    int
	k       int    // blocks
	buf     []byte // the message: the root's send buffer or the receiver's destination
	seq     uint64 // root: send-order index of the message
	sends   []op   // this member's plan, in step order
	recvs   []op
	have    bitset // blocks held
	// Invariants: sendsDone ≤ sendNext ≤ len(sends), sendNext-sendsDone ≤
	// sendWindow; recvsDone ≤ recvNext ≤ len(recvs), recvNext-recvsDone ≤
	// recvWindow. The sends in flight, sends[sendsDone:sendNext], all go to
	// one peer, and the receives in flight all come from one, so each
	// completes in the order it was posted (see Flow control above).
	sendNext, sendsDone int
	recvNext, recvsDone int
	// queue holds the send-order indexes of large messages waiting at the
	// root.
	queue []uint64
}

func (g *Group) numBlocks(size int) int {
	if size == 0 {
		return 1
	}
	return (size + g.cfg.BlockBytes - 1) / g.cfg.BlockBytes
}

// blockRange returns the bytes of block b of a message of size bytes.
func (g *Group) blockRange(size, b int) (lo, hi int) {
	lo = b * g.cfg.BlockBytes
	return lo, min(lo+g.cfg.BlockBytes, size)
}

func (s *largeState) initReceiver(g *Group) {
	s.scratch = make([]byte, g.cfg.BlockBytes)
}

// awaitLargeLocked posts the scratch buffer for the first block of the
// next message and tells the member that sends it.
func (g *Group) awaitLargeLocked() {
	src := g.sched.firstSource()
	qp := g.mu.qps[chanBlocks][src]
	if err := qp.PostRecv(g.mu.large.scratch, wrFirst); err != nil {
		g.failLocked(err)
		return
	}
	if err := qp.Signal(0); err != nil {
		g.failLocked(err)
	}
}

// startLargeLocked begins the root's next queued large message.
func (g *Group) startLargeLocked() {
	L := &g.mu.large
	if L.active || len(L.queue) == 0 {
		return
	}
	seq := L.queue[0]
	L.queue = L.queue[1:]
	msg := g.mu.root.entry(seq).msg
	L.active, L.seq, L.buf, L.size = true, seq, msg, len(msg)
	L.k = g.numBlocks(L.size)
	L.sends, L.recvs = g.sched.plan(L.k, L.sends[:0], L.recvs[:0])
	L.have.reset(L.k, true)
	L.sendNext, L.sendsDone, L.recvNext, L.recvsDone = 0, 0, 0, 0
	g.pumpBlocksLocked()
	g.finishLargeLocked()
}

// blockReceivedLocked handles a completed block receive from rank peer.
func (g *Group) blockReceivedLocked(peer int, wr uint64, n int, imm uint64) {
	L := &g.mu.large
	if wr == wrFirst {
		if L.active {
			g.failLocked(fmt.Errorf("first block from node %d while a message is in progress", g.ranks[peer]))
			return
		}
		if imm > uint64(g.cfg.MaxMessageBytes) {
			g.failLocked(fmt.Errorf("node %d announced a %d-byte message, limit %d", g.ranks[peer], imm, g.cfg.MaxMessageBytes))
			return
		}
		size := int(imm)
		k := g.numBlocks(size)
		L.sends, L.recvs = g.sched.plan(k, L.sends[:0], L.recvs[:0])
		if len(L.recvs) == 0 || L.recvs[0].peer != peer {
			g.failLocked(fmt.Errorf("schedule: first block of a %d-block message not expected from rank %d", k, peer))
			return
		}
		b := L.recvs[0].block
		lo, hi := g.blockRange(size, b)
		if n != hi-lo {
			g.failLocked(fmt.Errorf("node %d sent %d bytes for block %d of a %d-byte message, want %d", g.ranks[peer], n, b, size, hi-lo))
			return
		}
		buf, err := g.allocLocked(size)
		if err != nil {
			g.failLocked(err)
			return
		}
		copy(buf[lo:hi], L.scratch[:n])
		L.active, L.size, L.k, L.buf = true, size, k, buf
		L.have.reset(k, false)
		L.have.set(b)
		L.sendNext, L.sendsDone, L.recvNext, L.recvsDone = 0, 0, 1, 1
		g.m.blockRecv(n)
	} else {
		b := int(wr)
		if !L.active || imm != uint64(L.size) || wr >= uint64(L.k) || L.have.get(b) {
			g.failLocked(fmt.Errorf("unexpected block %d (size %d) from node %d", wr, imm, g.ranks[peer]))
			return
		}
		if lo, hi := g.blockRange(L.size, b); n != hi-lo {
			g.failLocked(fmt.Errorf("node %d sent %d bytes for block %d, want %d", g.ranks[peer], n, b, hi-lo))
			return
		}
		L.have.set(b)
		L.recvsDone++
		g.m.blockRecv(n)
	}
	g.postBlockRecvsLocked()
	g.pumpBlocksLocked()
	g.finishLargeLocked()
}

// postBlockRecvsLocked posts this member's next block receives, in step
// order, each announced to its sender with a ready-for-block signal, as
// far as flow control allows.
func (g *Group) postBlockRecvsLocked() {
	L := &g.mu.large
	for L.active && L.recvNext < len(L.recvs) && mayStart(L.recvs, L.recvsDone, L.recvNext, recvWindow) {
		o := L.recvs[L.recvNext]
		lo, hi := g.blockRange(L.size, o.block)
		qp := g.mu.qps[chanBlocks][o.peer]
		if err := qp.PostRecv(L.buf[lo:hi:hi], uint64(o.block)); err != nil {
			g.failLocked(err)
			return
		}
		if err := qp.Signal(0); err != nil {
			g.failLocked(err)
			return
		}
		L.recvNext++
	}
}

// pumpBlocksLocked posts this member's next sends, in step order, as long
// as it holds the block, the receiver announced a buffer for it, and flow
// control allows.
func (g *Group) pumpBlocksLocked() {
	L := &g.mu.large
	for L.active && L.sendNext < len(L.sends) && mayStart(L.sends, L.sendsDone, L.sendNext, sendWindow) {
		o := L.sends[L.sendNext]
		if !L.have.get(o.block) || g.mu.credits[o.peer] == 0 || L.owesReady(o.peer, o.step) {
			return
		}
		g.mu.credits[o.peer]--
		lo, hi := g.blockRange(L.size, o.block)
		if err := g.mu.qps[chanBlocks][o.peer].PostSend(L.buf[lo:hi], uint64(L.size), uint64(o.block)); err != nil {
			g.failLocked(err)
			return
		}
		L.sendNext++
	}
}

// mayStart reports whether ops[next] may start while ops[done:next] are
// in flight: they are fewer than window and all with the same peer as it.
// Because every op starts this way, ops[next-1] speaks for all of them.
func mayStart(ops []op, done, next, window int) bool {
	inFlight := next - done
	return inFlight == 0 || inFlight < window && ops[next-1].peer == ops[next].peer
}

// owesReady reports whether this member has yet to announce a receive from
// rank peer at step or earlier.
func (s *largeState) owesReady(peer, step int) bool {
	for _, o := range s.recvs[s.recvNext:] {
		if o.step > step {
			return false
		}
		if o.peer == peer {
			return true
		}
	}
	return false
}

// blockSentLocked handles a completed block send.
func (g *Group) blockSentLocked() {
	L := &g.mu.large
	if !L.active || L.sendsDone == L.sendNext {
		g.failLocked(fmt.Errorf("unexpected block send completion"))
		return
	}
	L.sendsDone++
	g.pumpBlocksLocked()
	g.finishLargeLocked()
}

// finishLargeLocked completes the current message once this member has
// made all its sends and receives, and moves on to the next.
func (g *Group) finishLargeLocked() {
	L := &g.mu.large
	if !L.active || L.sendsDone < len(L.sends) || L.recvsDone < len(L.recvs) {
		return
	}
	L.active = false
	buf := L.buf
	L.buf = nil
	if g.rank == 0 {
		g.mu.root.markDone(g, L.seq)
		g.startLargeLocked()
		return
	}
	g.mu.recv.largeComplete(g, buf)
	if g.doneLocked() == nil {
		g.awaitLargeLocked()
	}
}

// allocLocked returns the destination for an incoming message of size
// bytes, from Callbacks.Alloc when it provides one.
func (g *Group) allocLocked(size int) ([]byte, error) {
	if g.cb.Alloc != nil {
		if b := g.cb.Alloc(size); b != nil {
			if cap(b) < size {
				return nil, fmt.Errorf("the Alloc callback returned %d bytes for a %d-byte message", cap(b), size)
			}
			return b[:size], nil
		}
	}
	return make([]byte, size), nil
}

// bitset is a fixed-size set of block numbers.
type bitset struct{ w []uint64 }

func (s *bitset) reset(n int, all bool) {
	words := (n + 63) / 64
	if cap(s.w) < words {
		s.w = make([]uint64, words)
	}
	s.w = s.w[:words]
	var fill uint64
	if all {
		fill = ^uint64(0)
	}
	for i := range s.w {
		s.w[i] = fill
	}
}

func (s *bitset) set(i int)      { s.w[i/64] |= 1 << (i % 64) }
func (s *bitset) get(i int) bool { return s.w[i/64]&(1<<(i%64)) != 0 }
