package multicast

// rootState is the root's send queue: every accepted message, in send
// order, until it is complete at the root, plus the batch channel's state.
type rootState struct {
	// entries[head+i] is the message with send-order index base+i;
	// messages leave from the front once complete, so Complete runs in
	// send order.
	entries []rootEntry
	head    int
	base    uint64
	next    uint64 // send-order index of the next message
	// queuedBytes and the number of entries stay within maxBytes and
	// maxMsgs (see hasSpace).
	queuedBytes       int
	maxBytes, maxMsgs int
	batches           batchSender
}

type rootEntry struct {
	msg   []byte
	large bool
	done  bool
}

func (r *rootState) init(g *Group) {
	r.maxBytes, r.maxMsgs = g.cfg.MaxQueuedBytes, g.cfg.MaxQueuedMessages
	r.batches.init(g)
}

func (r *rootState) entry(seq uint64) *rootEntry { return &r.entries[r.head+int(seq-r.base)] }

func (r *rootState) queued() int { return len(r.entries) - r.head }

// hasSpace reports whether a message of n bytes fits in the send queue. A
// message larger than the byte limit is let in when the queue is empty, so
// that it can be sent at all.
func (r *rootState) hasSpace(n int) bool {
	if r.queued() == 0 {
		return true
	}
	return r.queued() < r.maxMsgs && r.queuedBytes+n <= r.maxBytes
}

// enqueue accepts msg: small messages go to the batch channel, large ones
// to the block channel with a placeholder on the batch channel.
func (r *rootState) enqueue(g *Group, msg []byte) {
	seq := r.next
	r.next++
	large := g.cfg.SmallThreshold < 0 || len(msg) > g.cfg.SmallThreshold
	r.entries = append(r.entries, rootEntry{msg: msg, large: large})
	r.queuedBytes += len(msg)
	g.m.sent(len(msg))
	if len(g.ranks) == 1 {
		r.markDone(g, seq)
		return
	}
	if large {
		g.mu.large.queue = append(g.mu.large.queue, seq)
		g.startLargeLocked()
	}
	g.pumpBatchesLocked()
}

// markDone records that message seq is complete at the root and delivers
// every complete message at the front of the queue.
func (r *rootState) markDone(g *Group, seq uint64) {
	r.entry(seq).done = true
	freed := false
	for r.queued() > 0 && r.entries[r.head].done {
		msg := r.entries[r.head].msg
		r.entries[r.head] = rootEntry{}
		r.head++
		r.base++
		r.queuedBytes -= len(msg)
		g.completeLocked(msg)
		freed = true
	}
	switch {
	case r.head == len(r.entries):
		r.entries, r.head = r.entries[:0], 0
	case r.head > 1024 && r.head > len(r.entries)/2:
		n := copy(r.entries, r.entries[r.head:])
		clear(r.entries[n:])
		r.entries, r.head = r.entries[:n], 0
	}
	if freed {
		g.spaceFreedLocked()
	}
}
