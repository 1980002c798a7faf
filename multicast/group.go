package multicast

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/convoy-gcs/convoy/rdma"
)

// channel numbers: each group uses two streams per member pair.
const (
	chanBlocks  = 0 // large messages, block by block, per the schedule
	chanBatches = 1 // small messages and placeholders, root to each receiver
	numChannels = 4 // stream ids are id*numChannels + channel
)

func streamID(group uint64, ch int) rdma.StreamID {
	return rdma.StreamID(group*numChannels + uint64(ch))
}

// StreamGroup returns the id of the group a stream of the transport
// belongs to, for a stream that a group opened (to tell apart the
// traffic of different groups on an endpoint).
func StreamGroup(s rdma.StreamID) uint64 { return uint64(s) / numChannels }

// Group is one member's handle on a multicast group. Its methods are safe
// for concurrent use.
type Group struct {
	cfg   GroupConfig
	cb    Callbacks
	log   *slog.Logger
	m     groupMetrics
	rank  int           // this member's rank; 0 is the root
	ranks []rdma.NodeID // rank → node
	sched schedule

	mu struct {
		sync.Mutex
		closed bool
		err    error // set once when the group fails
		// qps[ch][rank] is the queue pair to that rank on channel ch, or
		// nil if this member never talks to it on ch.
		qps [2][]rdma.QueuePair
		// credits[rank] counts ready-for-block signals from rank on the
		// blocks channel not yet used by a send.
		credits []int
		large   largeState
		root    rootState
		recv    recvState
		// events waits to be delivered to Callbacks, in order, outside mu.
		events     []event
		eventsHead int
		delivering bool
		// space is closed and replaced when the send queue shrinks while
		// spaceWaiters senders wait for it.
		space        chan struct{}
		spaceWaiters int
	}
}

// event is one pending Complete or Failed call.
type event struct {
	msg []byte
	err error
}

// NewGroup creates this member's part of a group on endpoint ep, which must
// be one of cfg.Members. It opens the queue pairs it needs and, on
// receivers, posts the buffers for the first messages.
func NewGroup(ctx context.Context, ep rdma.Endpoint, cfg GroupConfig, cb Callbacks) (*Group, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{cfg: c, cb: cb, log: c.Logger.With("group", c.ID)}
	g.ranks = append(g.ranks, c.Root)
	for _, m := range c.Members {
		if m != c.Root {
			g.ranks = append(g.ranks, m)
		}
	}
	g.rank = -1
	for r, m := range g.ranks {
		if m == ep.ID() {
			g.rank = r
		}
	}
	if g.rank < 0 {
		return nil, fmt.Errorf("multicast: node %d is not a member of group %d", ep.ID(), c.ID)
	}
	g.sched, err = newSchedule(c.Algorithm, len(g.ranks), g.rank)
	if err != nil {
		return nil, err
	}
	g.m = c.Metrics.group(c.Algorithm)
	n := len(g.ranks)
	g.mu.Lock()
	defer g.unlockAndDeliver()
	g.mu.space = make(chan struct{})
	g.mu.credits = make([]int, n)
	for ch := range g.mu.qps {
		g.mu.qps[ch] = make([]rdma.QueuePair, n)
	}
	open := func(ch, peer int) error {
		qp, err := ep.Open(ctx, g.ranks[peer], streamID(c.ID, ch), &qpHandler{g: g, peer: peer, ch: ch})
		if err != nil {
			return fmt.Errorf("multicast: group %d: open stream to node %d: %w", c.ID, g.ranks[peer], err)
		}
		g.mu.qps[ch][peer] = qp
		return nil
	}
	// A stream that fails to open closes the group: the streams opened
	// before close, and their handler calls that wait for mu find the
	// group closed.
	for _, p := range g.sched.peers() {
		if err := open(chanBlocks, p); err != nil {
			g.closeLocked()
			return nil, err
		}
	}
	if g.rank == 0 {
		for p := 1; p < n; p++ {
			if err := open(chanBatches, p); err != nil {
				g.closeLocked()
				return nil, err
			}
		}
		g.mu.root.init(g)
	} else {
		if err := open(chanBatches, 0); err != nil {
			g.closeLocked()
			return nil, err
		}
		g.mu.recv.init(g)
		g.mu.large.initReceiver(g)
		g.startBatchReceivesLocked()
		if g.doneLocked() == nil {
			g.awaitLargeLocked()
		}
	}
	if err := g.mu.err; err != nil {
		// Setup failed (a peer unreachable at once): report it here rather
		// than through Failed.
		g.mu.events = g.mu.events[:0]
		return nil, err
	}
	return g, nil
}

// Rank returns this member's rank in the group (0 for the root).
func (g *Group) Rank() int { return g.rank }

// Size returns the number of members.
func (g *Group) Size() int { return len(g.ranks) }

// Err returns the error the group failed with, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
}

// Send queues msg for multicast to every member. It returns once the
// message is accepted; the buffer must not be modified until Complete is
// called for it on the root. When the send queue is full Send waits for
// space, or returns ErrBackpressure if the group was configured with
// NoWait. It returns ErrNotRoot on members other than the root, ErrTooLarge
// above MaxMessageBytes, and an error wrapping ErrGroupFailed or ErrClosed
// once the group has ended.
func (g *Group) Send(ctx context.Context, msg []byte) error {
	if g.rank != 0 {
		return ErrNotRoot
	}
	if len(msg) > g.cfg.MaxMessageBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(msg), g.cfg.MaxMessageBytes)
	}
	g.mu.Lock()
	for {
		if err := g.doneLocked(); err != nil {
			g.mu.Unlock()
			return err
		}
		if g.mu.root.hasSpace(len(msg)) {
			break
		}
		if g.cfg.NoWait {
			g.mu.Unlock()
			return ErrBackpressure
		}
		space := g.mu.space
		g.mu.spaceWaiters++
		g.mu.Unlock()
		var err error
		select {
		case <-space:
		case <-ctx.Done():
			err = ctx.Err()
		}
		g.mu.Lock()
		g.mu.spaceWaiters--
		if err != nil {
			g.mu.Unlock()
			return err
		}
	}
	g.mu.root.enqueue(g, msg)
	g.unlockAndDeliver()
	return nil
}

// Close destroys this member's part of the group: it closes its queue
// pairs (peers still using the group see it fail), abandons queued
// messages and frees the group's buffers. Callbacks already running may
// still finish; no new ones start.
func (g *Group) Close() error {
	g.mu.Lock()
	g.closeLocked()
	g.mu.Unlock()
	return nil
}

// closeLocked does Close's work, once.
func (g *Group) closeLocked() {
	if g.mu.closed {
		return
	}
	g.mu.closed = true
	g.closeQPsLocked()
	g.releaseLocked()
}

// doneLocked returns the error Send should report once the group ended.
func (g *Group) doneLocked() error {
	switch {
	case g.mu.closed:
		return ErrClosed
	case g.mu.err != nil:
		return g.mu.err
	}
	return nil
}

// failLocked stops the group with err: it closes every queue pair, so
// peers fail too, and queues the one Failed callback.
func (g *Group) failLocked(err error) {
	if g.mu.closed || g.mu.err != nil {
		return
	}
	g.mu.err = fmt.Errorf("%w: group %d on node %d: %w", ErrGroupFailed, g.cfg.ID, g.ranks[g.rank], err)
	g.log.Warn("multicast group failed", "err", err)
	g.m.failed()
	g.closeQPsLocked()
	g.releaseLocked()
	g.mu.events = append(g.mu.events, event{err: g.mu.err})
}

func (g *Group) closeQPsLocked() {
	for ch := range g.mu.qps {
		for i, qp := range g.mu.qps[ch] {
			if qp != nil {
				_ = qp.Close()
				g.mu.qps[ch][i] = nil
			}
		}
	}
}

// releaseLocked drops every buffer and queued message and wakes senders.
func (g *Group) releaseLocked() {
	g.mu.large = largeState{}
	g.mu.root = rootState{}
	g.mu.recv = recvState{}
	g.spaceFreedLocked()
}

// spaceFreedLocked wakes senders waiting for queue space.
func (g *Group) spaceFreedLocked() {
	if g.mu.spaceWaiters == 0 {
		return
	}
	close(g.mu.space)
	g.mu.space = make(chan struct{})
}

// completeLocked queues Complete(msg).
func (g *Group) completeLocked(msg []byte) {
	g.mu.events = append(g.mu.events, event{msg: msg})
}

// unlockAndDeliver releases mu and, unless another goroutine is already
// doing so, delivers queued events to the callbacks in order, outside the
// lock.
func (g *Group) unlockAndDeliver() {
	if g.mu.delivering || g.mu.eventsHead == len(g.mu.events) {
		g.mu.Unlock()
		return
	}
	g.mu.delivering = true
	for g.mu.eventsHead < len(g.mu.events) {
		ev := g.mu.events[g.mu.eventsHead]
		g.mu.events[g.mu.eventsHead] = event{}
		g.mu.eventsHead++
		closed := g.mu.closed
		g.mu.Unlock()
		switch {
		case closed:
		case ev.err != nil:
			if g.cb.Failed != nil {
				g.cb.Failed(ev.err)
			}
		case g.cb.Complete != nil:
			g.cb.Complete(ev.msg)
		}
		g.mu.Lock()
	}
	g.mu.events = g.mu.events[:0]
	g.mu.eventsHead = 0
	g.mu.delivering = false
	g.mu.Unlock()
}

// qpHandler routes one queue pair's completions into the group.
type qpHandler struct {
	g    *Group
	peer int // rank at the other end
	ch   int
}

func (h *qpHandler) RecvComplete(wr uint64, n int, imm uint64) {
	g := h.g
	g.mu.Lock()
	if g.doneLocked() == nil {
		if h.ch == chanBlocks {
			g.blockReceivedLocked(h.peer, wr, n, imm)
		} else {
			g.batchReceivedLocked(wr, n)
		}
	}
	g.unlockAndDeliver()
}

func (h *qpHandler) SendComplete(wr uint64) {
	g := h.g
	g.mu.Lock()
	if g.doneLocked() == nil {
		if h.ch == chanBlocks {
			g.blockSentLocked()
		} else {
			g.batchSentLocked(h.peer, wr)
		}
	}
	g.unlockAndDeliver()
}

func (h *qpHandler) Signal(imm uint64) {
	g := h.g
	g.mu.Lock()
	if g.doneLocked() == nil {
		if h.ch == chanBlocks {
			g.mu.credits[h.peer]++
			g.pumpBlocksLocked()
		} else {
			g.batchCreditLocked(h.peer, imm)
		}
	}
	g.unlockAndDeliver()
}

func (h *qpHandler) Failed(err error) {
	g := h.g
	g.mu.Lock()
	g.failLocked(fmt.Errorf("stream to node %d: %w", g.ranks[h.peer], err))
	g.unlockAndDeliver()
}
