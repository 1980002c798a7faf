package rdma

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"time"
)

// memPair names an unordered pair of nodes, lower id first.
type memPair struct{ lo, hi NodeID }

func makePair(a, b NodeID) memPair {
	if a > b {
		a, b = b, a
	}
	return memPair{lo: a, hi: b}
}

// memConn is one connection of a MemFabric. Side 0 is the lower node id,
// side 1 the higher; dirs[i] carries frames from side i to side 1-i.
type memConn struct {
	id     uint64
	nodes  [2]NodeID
	sides  [2]memSide
	dirs   [2]*memDir
	broken bool
}

// memSide is one node's view of a connection.
type memSide struct {
	streams map[StreamID]*memQP // open queue pairs on this connection
	recent  recentSet           // streams closed here; late frames are dropped
	pending pendingSignals      // signals for streams not open here yet
}

// memDir is one direction of a connection: a FIFO of frames.
type memDir struct {
	conn      *memConn
	from      int // sending side
	frames    ring[memFrame]
	activeIdx int       // index in the fabric's active list, -1 if absent
	laterIdx  int       // index in the fabric's later heap, -1 if absent
	lastDue   time.Time // due time of the newest frame; keeps the FIFO
}

// due is when d's first frame is due. d must hold a frame.
func (d *memDir) due() time.Time { return d.frames.peek().due }

// dirHeap orders directions by the time their first frame is due, for
// container/heap.
type dirHeap []*memDir

func (h dirHeap) Len() int { return len(h) }
func (h dirHeap) Less(i, j int) bool {
	if a, b := h[i].due(), h[j].due(); !a.Equal(b) {
		return a.Before(b)
	}
	// Equal times fall back on a fixed order, so that a seed replays.
	if h[i].conn.id != h[j].conn.id {
		return h[i].conn.id < h[j].conn.id
	}
	return h[i].from < h[j].from
}
func (h dirHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].laterIdx, h[j].laterIdx = i, j
}
func (h *dirHeap) Push(x any) {
	d := x.(*memDir)
	d.laterIdx = len(*h)
	*h = append(*h, d)
}
func (h *dirHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	d.laterIdx = -1
	return d
}

// memFrame is a frame in flight.
type memFrame struct {
	typ     frameType
	stream  StreamID
	imm     uint64
	payload []byte
	src     *memQP // sender; nil for close frames
	wr      uint64
	due     time.Time
}

func (c *memConn) sideOf(id NodeID) int {
	if c.nodes[0] == id {
		return 0
	}
	return 1
}

// connLocked returns the current connection between a and b, making one if
// there is none. REQUIRES: f.mu.
func (f *MemFabric) connLocked(a, b NodeID) *memConn {
	p := makePair(a, b)
	if c := f.mu.conns[p]; c != nil {
		return c
	}
	f.mu.nextID++
	c := &memConn{id: f.mu.nextID, nodes: [2]NodeID{p.lo, p.hi}}
	for i := range c.sides {
		c.sides[i].streams = make(map[StreamID]*memQP)
		c.dirs[i] = &memDir{conn: c, from: i, activeIdx: -1, laterIdx: -1}
	}
	f.mu.conns[p] = c
	f.log.Debug("rdma: mem connection up", "conn", c.id, "a", p.lo, "b", p.hi)
	return c
}

// sendLocked queues a frame from side on c. REQUIRES: f.mu.
func (f *MemFabric) sendLocked(c *memConn, side int, fr memFrame) {
	d := c.dirs[side]
	if f.delayed() {
		fr.due = f.clock().Add(time.Duration(f.mu.rng.Int64N(int64(f.maxDelay) + 1)))
		if fr.due.Before(d.lastDue) {
			fr.due = d.lastDue
		}
		d.lastDue = fr.due
	}
	d.frames.push(fr)
	if d.frames.len() > 1 {
		return // d is active or later already
	}
	if !f.delayed() {
		f.addActiveLocked(d)
	} else {
		heap.Push(&f.mu.later, d)
	}
}

// addActiveLocked adds d to the active list. REQUIRES: f.mu.
func (f *MemFabric) addActiveLocked(d *memDir) {
	d.activeIdx = len(f.mu.active)
	f.mu.active = append(f.mu.active, d)
}

// deactivateLocked forgets d, which has no frame left. REQUIRES: f.mu.
func (f *MemFabric) deactivateLocked(d *memDir) {
	if d.laterIdx >= 0 {
		heap.Remove(&f.mu.later, d.laterIdx)
	}
	f.removeActiveLocked(d)
}

// removeActiveLocked removes d from the active list, if it is there.
// REQUIRES: f.mu.
func (f *MemFabric) removeActiveLocked(d *memDir) {
	i := d.activeIdx
	if i < 0 {
		return
	}
	last := len(f.mu.active) - 1
	f.mu.active[i] = f.mu.active[last]
	f.mu.active[i].activeIdx = i
	f.mu.active[last] = nil
	f.mu.active = f.mu.active[:last]
	d.activeIdx = -1
}

// deliverLocked delivers the head frame of d. REQUIRES: f.mu.
func (f *MemFabric) deliverLocked(d *memDir) {
	fr, _ := d.frames.pop()
	if d.frames.len() == 0 {
		f.deactivateLocked(d)
	}
	c := d.conn
	to := 1 - d.from
	dst := &c.sides[to]
	from := c.nodes[d.from]
	// Frames of a queue pair that was closed or failed after posting them
	// are abandoned, as the tcp backend drops its unsent frames.
	if fr.src != nil && !fr.src.isOpen() {
		return
	}
	q := dst.streams[fr.stream]
	switch fr.typ {
	case frameData:
		if q == nil {
			if dst.recent.has(fr.stream) {
				f.pushLocked(fr.src, qpEvent{kind: evSend, wr: fr.wr})
				return
			}
			perr := protocolError(from, fr.stream, rejectStream, "data frame for a stream that was never opened")
			f.protocolBreakLocked(c, to, perr)
			return
		}
		rw, reason, ok := q.takeRecv(len(fr.payload))
		switch {
		case !ok:
		case reason != "":
			perr := protocolError(from, fr.stream, rejectReceiveBuffer, reason)
			f.log.Warn("rdma: bad transfer from peer", "node", c.nodes[to], "err", perr)
			f.failQPLocked(q, perr)
		default:
			n := copy(rw.buf, fr.payload)
			f.pushLocked(q, qpEvent{kind: evRecv, wr: rw.wr, n: n, imm: fr.imm})
		}
		f.pushLocked(fr.src, qpEvent{kind: evSend, wr: fr.wr})
	case frameSignal:
		switch {
		case q != nil:
			f.pushLocked(q, qpEvent{kind: evSignal, imm: fr.imm})
		case dst.recent.has(fr.stream):
		case !dst.pending.add(fr.stream, fr.imm):
			perr := protocolError(from, fr.stream, rejectStream, fmt.Sprintf("more than %d signals for streams that are not open", maxPendingSignals))
			f.protocolBreakLocked(c, to, perr)
		}
	case frameClose:
		if q != nil {
			f.failQPLocked(q, peerClosedError(from, fr.stream))
		} else {
			dst.pending.take(fr.stream)
		}
	}
}

// protocolBreakLocked breaks c because side got bad input perr.
// REQUIRES: f.mu.
func (f *MemFabric) protocolBreakLocked(c *memConn, side int, perr *ProtocolError) {
	f.log.Warn("rdma: closing connection after bad input", "node", c.nodes[side], "err", perr)
	var errs [2]error
	errs[side] = &connError{peer: c.nodes[1-side], cause: perr}
	errs[1-side] = &connError{peer: c.nodes[side], cause: fmt.Errorf("node %d closed the connection", c.nodes[side])}
	f.breakConnLocked(c, errs, -1)
}

// breakConnLocked breaks c: queued frames are dropped and every queue pair
// on side i fails with errs[i], except on side silent (-1 for none), whose
// queue pairs are left to the caller. REQUIRES: f.mu.
func (f *MemFabric) breakConnLocked(c *memConn, errs [2]error, silent int) {
	if c.broken {
		return
	}
	c.broken = true
	if p := makePair(c.nodes[0], c.nodes[1]); f.mu.conns[p] == c {
		delete(f.mu.conns, p)
	}
	for _, d := range c.dirs {
		f.deactivateLocked(d) // while its first frame still orders the heap
		d.frames.clear()
	}
	for i := range c.sides {
		if i == silent {
			continue
		}
		for _, q := range sortedQPs(c.sides[i].streams) {
			f.failQPLocked(q, errs[i])
		}
	}
	f.log.Debug("rdma: mem connection broken", "conn", c.id, "a", c.nodes[0], "b", c.nodes[1])
}

// sortedQPs returns the queue pairs of m ordered by stream, so that the
// fabric's behaviour does not depend on map iteration order.
func sortedQPs(m map[StreamID]*memQP) []*memQP {
	qs := make([]*memQP, 0, len(m))
	for _, q := range m {
		qs = append(qs, q)
	}
	slices.SortFunc(qs, func(a, b *memQP) int { return cmp.Compare(a.stream, b.stream) })
	return qs
}
