package ordering

import (
	"fmt"
	"math"
)

// key places a held message in delivery order: by stamp, then sender
// rank (a sender's stamps all differ, across its channels too), then
// topic and sequence, so that even a faulty sender's messages have
// distinct keys.
type key struct {
	ts    Timestamp
	seq   uint64
	rank  int32
	topic int32
}

func keyLess(a, b key) bool {
	if a.ts != b.ts {
		return a.ts < b.ts
	}
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	if a.topic != b.topic {
		return a.topic < b.topic
	}
	return a.seq < b.seq
}

// channelQueue holds the messages of one channel (a sender's to the
// group, or to a topic) that are not yet delivered, by sequence number.
// Messages may arrive out of order, so a queue can hold messages beyond
// a missing one. A channel's stamps increase with its sequence numbers
// (its sender's clock issues increasing stamps, and barrier.Promises
// rejects a message that breaks this), so its messages are delivered in
// sequence order, from next on.
type channelQueue struct {
	rank, topic int32
	next        uint64    // sequence number of items[head]
	items       []heldMsg // items[head+i] is message next+i
	head        int
}

// heldMsg is one message of a channel, once it has arrived.
type heldMsg struct {
	ts      Timestamp
	payload []byte
	ok      bool // the message has arrived
}

func (q *channelQueue) put(seq uint64, ts Timestamp, p []byte) {
	i := q.head + int(seq-q.next)
	for len(q.items) <= i {
		q.items = append(q.items, heldMsg{})
	}
	q.items[i] = heldMsg{ts: ts, payload: p, ok: true}
}

// first returns the key of the channel's next message, if it has arrived.
func (q *channelQueue) first() (key, bool) {
	if q.head == len(q.items) || !q.items[q.head].ok {
		return key{}, false
	}
	return key{ts: q.items[q.head].ts, seq: q.next, rank: q.rank, topic: q.topic}, true
}

// take removes message seq, which must be the channel's next and held.
func (q *channelQueue) take(seq uint64) []byte {
	if seq != q.next || q.head == len(q.items) || !q.items[q.head].ok {
		panic(fmt.Sprintf("ordering: delivering message %d of a channel whose next is %d (held: %v)", seq, q.next, q.head < len(q.items) && q.items[q.head].ok))
	}
	p := q.items[q.head].payload
	q.items[q.head] = heldMsg{}
	q.head++
	q.next++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return p
}

// chanHead is a channel's next message, held, in the merge.
type chanHead struct {
	key
	slot int32
}

// merge is a k-way merge of the channels' queues: a binary min-heap, by
// keyLess, of the channels whose next message has arrived, each keyed by
// that message. Its least entry is the next message to deliver. Messages
// behind a missing one wait, and the barrier never passes them: a
// promise of a channel applies only once its messages up to the promise
// are held (barrier.Promises), so the barrier stays at or below the
// stamp of the channel's missing message.
type merge []chanHead

// push adds a channel whose next message has arrived; it must not be in
// the merge already.
func (m *merge) push(h chanHead) {
	*m = append(*m, h)
	m.up(len(*m) - 1)
}

// pop removes the least entry.
func (m *merge) pop() {
	h := *m
	n := len(h) - 1
	h[0] = h[n]
	*m = h[:n]
	if n > 0 {
		m.down(0)
	}
}

// replaceMin replaces the least entry with h.
func (m merge) replaceMin(h chanHead) {
	m[0] = h
	m.down(0)
}

// init restores the heap order of every entry.
func (m merge) init() {
	for i := len(m)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
}

func (m merge) up(i int) {
	h := m[i]
	for i > 0 {
		p := (i - 1) / 2
		if !keyLess(h.key, m[p].key) {
			break
		}
		m[i] = m[p]
		i = p
	}
	m[i] = h
}

func (m merge) down(i int) {
	h := m[i]
	for {
		c := 2*i + 1
		if c >= len(m) {
			break
		}
		if r := c + 1; r < len(m) && keyLess(m[r].key, m[c].key) {
			c = r
		}
		if !keyLess(m[c].key, h.key) {
			break
		}
		m[i] = m[c]
		i = c
	}
	m[i] = h
}

// holdMessage adds an arrived message to its channel's queue, and the channel
// to the merge if the message is the channel's next.
func (c *Core) holdMessage(slot int, seq uint64, ts Timestamp, payload []byte) {
	q := &c.chans[slot]
	q.put(seq, ts, payload)
	c.buffered++
	if seq == q.next {
		c.merge.push(chanHead{key{ts: ts, seq: seq, rank: q.rank, topic: q.topic}, int32(slot)})
	}
}

// takeMin removes the least message of the merge from its channel and
// returns it; the channel's following message takes its place in the
// merge if it has arrived and its sequence number is at most limit.
func (c *Core) takeMin(limit uint64) (key, []byte) {
	h := c.merge[0]
	q := &c.chans[h.slot]
	p := q.take(h.seq)
	c.buffered--
	if k, ok := q.first(); ok && k.seq <= limit {
		c.merge.replaceMin(chanHead{k, h.slot})
	} else {
		c.merge.pop()
	}
	return h.key, p
}

// initChans sets up the queues of the channels this member receives, in
// their promise slots (see initTopics, which counts them).
func (c *Core) initChans(slots int) {
	n := c.cfg.Members
	c.chans = make([]channelQueue, slots)
	for r := range n {
		c.chans[r] = channelQueue{rank: int32(r), next: 1}
	}
	for i, t := range c.topics {
		if t.subscribed() {
			for r := range n {
				c.chans[t.slot+r] = channelQueue{rank: int32(r), topic: int32(i + 1), next: 1}
			}
		}
	}
}

// deliverBelow delivers the held messages stamped below b, in order.
func (c *Core) deliverBelow(b Timestamp) {
	for len(c.merge) > 0 && c.merge[0].ts < b {
		k, p := c.takeMin(math.MaxUint64)
		c.emit(entry{ts: k.ts, rank: int(k.rank), topic: int(k.topic), seq: k.seq, payload: p})
	}
}

// deliverCut delivers the held messages up to cut, in order, whatever
// their stamps: it merges the channels whose next message is within the
// cut. Every message of a channel up to its cut must be held. It leaves
// the merge empty; remerge puts back the channels beyond the cut.
func (c *Core) deliverCut(cut Cut) {
	within := c.merge[:0]
	for _, h := range c.merge {
		if h.seq <= cut.limit(h.key) {
			within = append(within, h)
		}
	}
	c.merge = within
	c.merge.init()
	for len(c.merge) > 0 {
		k, p := c.takeMin(cut.limit(c.merge[0].key))
		c.emit(entry{ts: k.ts, rank: int(k.rank), topic: int(k.topic), seq: k.seq, payload: p})
	}
}

// remerge sets up the merge anew from the channels' queues: every
// channel whose next message has arrived.
func (c *Core) remerge() {
	c.merge = c.merge[:0]
	for slot := range c.chans {
		if k, ok := c.chans[slot].first(); ok {
			c.merge.push(chanHead{k, int32(slot)})
		}
	}
}
