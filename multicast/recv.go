package multicast

import (
	"fmt"
)

// recvState is a receiver's side of the batch channel and the merge of both
// channels into send order.
type recvState struct {
	bufs    [][]byte // posted batch buffers; the work request id is the index
	nextSeq uint64   // send-order index of the next record expected
	// pending holds received records not yet delivered, in send order;
	// large records wait there for their message in largeDone.
	pending     []recvEntry
	pendingHead int
	largeDone   [][]byte
	// owed counts the batch buffers posted again whose credits the root
	// has not been granted yet (see grantBatchCreditsLocked).
	owed int
}

type recvEntry struct {
	large bool
	size  int
	msg   []byte
}

func (s *recvState) init(g *Group) {
	s.bufs = make([][]byte, g.cfg.BatchCredits)
	for i := range s.bufs {
		s.bufs[i] = make([]byte, g.cfg.BatchBytes)
	}
}

// startBatchReceivesLocked posts every batch buffer and grants the root a
// credit for each.
func (g *Group) startBatchReceivesLocked() {
	for i := 0; i < len(g.mu.recv.bufs) && g.doneLocked() == nil; i++ {
		g.postBatchLocked(i)
	}
	if g.doneLocked() == nil {
		g.grantBatchCreditsLocked(1)
	}
}

// postBatchLocked posts batch buffer i, at the start or again once its
// frame was taken in, and grants the root its credit, with others (see
// grantBatchCreditsLocked).
func (g *Group) postBatchLocked(i int) {
	qp := g.mu.qps[chanBatches][0]
	if err := qp.PostRecv(g.mu.recv.bufs[i], uint64(i)); err != nil {
		g.failLocked(err)
		return
	}
	g.mu.recv.owed++
	g.grantBatchCreditsLocked(max(len(g.mu.recv.bufs)/2, 1))
}

// grantBatchCreditsLocked grants the root the credits it is owed, in one
// signal whose immediate value is their number, once there are at least
// atLeast of them. Granting half the buffers at a time, rather than each one
// as it is posted again, saves signals and their wake-ups on both ends
// (at light load a frame holds one message, so a credit per frame was a
// signal per message). It costs the root no wait: fewer than half its
// credits are ever owed, so when it has none left, more than half its
// frames are in flight, and taking them in grants it more.
func (g *Group) grantBatchCreditsLocked(atLeast int) {
	s := &g.mu.recv
	if s.owed < atLeast {
		return
	}
	if err := g.mu.qps[chanBatches][0].Signal(uint64(s.owed)); err != nil {
		g.failLocked(err)
		return
	}
	s.owed = 0
}

// batchReceivedLocked handles batch frame wr of n bytes from the root.
func (g *Group) batchReceivedLocked(wr uint64, n int) {
	s := &g.mu.recv
	if wr >= uint64(len(s.bufs)) {
		g.failLocked(fmt.Errorf("batch completion for unknown buffer %d", wr))
		return
	}
	frame := s.bufs[wr][:n]
	maxSmall := max(g.cfg.SmallThreshold, 0)
	// Validate the whole frame before acting on any record of it.
	seq, err := decodeBatch(frame, maxSmall, g.cfg.MaxMessageBytes, func(batchRecord) error { return nil })
	if err == nil && seq != s.nextSeq {
		err = fmt.Errorf("%w: batch starts at message %d, want %d", errBadBatch, seq, s.nextSeq)
	}
	if err != nil {
		g.failLocked(fmt.Errorf("from node %d: %w", g.ranks[0], err))
		return
	}
	_, err = decodeBatch(frame, maxSmall, g.cfg.MaxMessageBytes, func(rec batchRecord) error {
		e := recvEntry{large: rec.large, size: rec.size}
		if !rec.large {
			buf, err := g.allocLocked(rec.size)
			if err != nil {
				return err
			}
			copy(buf, rec.data)
			e.msg = buf
		}
		s.pending = append(s.pending, e)
		s.nextSeq++
		return nil
	})
	if err != nil {
		g.failLocked(err)
		return
	}
	g.postBatchLocked(int(wr))
	s.deliver(g)
}

// largeComplete records a large message received in full.
func (s *recvState) largeComplete(g *Group, msg []byte) {
	s.largeDone = append(s.largeDone, msg)
	s.deliver(g)
}

// deliver completes every message at the front of the send order that is
// whole.
func (s *recvState) deliver(g *Group) {
	for s.pendingHead < len(s.pending) {
		e := &s.pending[s.pendingHead]
		if e.large {
			if len(s.largeDone) == 0 {
				break
			}
			msg := s.largeDone[0]
			s.largeDone[0] = nil
			s.largeDone = s.largeDone[1:]
			if len(msg) != e.size {
				g.failLocked(fmt.Errorf("message %d: announced %d bytes, received %d", s.nextSeq-uint64(len(s.pending)-s.pendingHead), e.size, len(msg)))
				return
			}
			e.msg = msg
		}
		g.m.delivered(len(e.msg))
		g.completeLocked(e.msg)
		*e = recvEntry{}
		s.pendingHead++
	}
	if s.pendingHead == len(s.pending) {
		s.pending, s.pendingHead = s.pending[:0], 0
	}
}
