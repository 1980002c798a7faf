package multicast

import "fmt"

// batchSender is the root's side of the batch channel. Records are packed
// into batch frames in send order; a frame is sealed when it is full or
// when the channel is idle (everything sealed has been handed to the
// transport and written), so an idle group sends a lone message at once
// while a busy one packs many per frame. Each sealed frame goes to every
// receiver as that receiver's credits (posted batch buffers) allow.
type batchSender struct {
	nextRecord uint64         // send-order index of the next message to pack
	open       *sealedBatch   // frame being filled, or nil
	sealed     []*sealedBatch // in order; sealed[i] has number sealedBase+i
	sealedBase uint64
	free       []*sealedBatch // reusable frames
	allocated  int
	maxFrames  int
	// per receiver rank (index 0 unused)
	credits []int
	next    []uint64 // number of the next frame to send to that receiver
	// outstanding counts posted sends not yet completed.
	outstanding int
}

type sealedBatch struct {
	w          batchWriter
	buf        []byte
	frame      []byte // encoded, once sealed
	first, end uint64 // send-order indexes of its records
	completed  int    // receivers whose send completed
}

func (b *batchSender) init(g *Group) {
	n := len(g.ranks)
	b.credits = make([]int, n)
	b.next = make([]uint64, n)
	b.maxFrames = g.cfg.BatchCredits + 2
}

// pumpBatchesLocked packs waiting records, seals frames and posts them.
func (g *Group) pumpBatchesLocked() {
	r := &g.mu.root
	b := &r.batches
	for b.nextRecord < r.next {
		if b.open == nil && !b.openFrame(g) {
			break
		}
		e := r.entry(b.nextRecord)
		inline := 0
		if !e.large {
			inline = len(e.msg)
		}
		if !b.open.w.fits(inline) {
			b.seal()
			continue
		}
		if e.large {
			b.open.w.appendLarge(len(e.msg))
		} else {
			b.open.w.appendSmall(e.msg)
		}
		b.nextRecord++
		b.open.end = b.nextRecord
	}
	if b.open != nil && b.open.w.count > 0 && b.idle() {
		b.seal()
	}
	for p := 1; p < len(g.ranks); p++ {
		for b.credits[p] > 0 && b.next[p] < b.sealedBase+uint64(len(b.sealed)) {
			f := b.sealed[b.next[p]-b.sealedBase]
			if err := g.mu.qps[chanBatches][p].PostSend(f.frame, 0, b.next[p]); err != nil {
				g.failLocked(err)
				return
			}
			b.credits[p]--
			b.next[p]++
			b.outstanding++
		}
	}
}

func (b *batchSender) openFrame(g *Group) bool {
	var f *sealedBatch
	switch {
	case len(b.free) > 0:
		f = b.free[len(b.free)-1]
		b.free = b.free[:len(b.free)-1]
	case b.allocated < b.maxFrames:
		f = &sealedBatch{buf: make([]byte, g.cfg.BatchBytes)}
		b.allocated++
	default:
		return false
	}
	f.w.reset(f.buf, b.nextRecord)
	f.first, f.end, f.completed, f.frame = b.nextRecord, b.nextRecord, 0, nil
	b.open = f
	return true
}

func (b *batchSender) seal() {
	b.open.frame = b.open.w.bytes()
	b.sealed = append(b.sealed, b.open)
	b.open = nil
}

// idle reports whether every sealed frame has been posted to, and written
// for, every receiver.
func (b *batchSender) idle() bool {
	if b.outstanding > 0 {
		return false
	}
	end := b.sealedBase + uint64(len(b.sealed))
	for p := 1; p < len(b.next); p++ {
		if b.next[p] != end {
			return false
		}
	}
	return true
}

// batchCreditLocked handles a grant of n credits (batch buffers posted)
// from receiver p.
func (g *Group) batchCreditLocked(p int, n uint64) {
	b := &g.mu.root.batches
	if n == 0 || n > maxBatchCredits {
		g.failLocked(fmt.Errorf("%w: node %d granted %d batch credits", errBadBatch, g.ranks[p], n))
		return
	}
	b.credits[p] += int(n)
	g.pumpBatchesLocked()
}

// batchSentLocked handles the completion of frame number wr to receiver p.
func (g *Group) batchSentLocked(p int, wr uint64) {
	r := &g.mu.root
	b := &r.batches
	if wr < b.sealedBase || wr >= b.sealedBase+uint64(len(b.sealed)) {
		g.failLocked(fmt.Errorf("unexpected completion of batch %d to rank %d", wr, p))
		return
	}
	b.outstanding--
	f := b.sealed[wr-b.sealedBase]
	f.completed++
	if f.completed == len(g.ranks)-1 {
		// Sends to each receiver complete in order, so frames finish in
		// order too: f is at the front.
		// Large messages may already have completed and left the queue,
		// and each markDone may let more leave.
		for s := f.first; s < f.end; s++ {
			if s >= r.base && !r.entry(s).large {
				r.markDone(g, s)
			}
		}
		b.sealed[0] = nil
		b.sealed = b.sealed[1:]
		b.sealedBase++
		b.free = append(b.free, f)
	}
	g.pumpBatchesLocked()
}
