package ordering

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// ErrCut is returned by Finish for a cut this member cannot deliver.
var ErrCut = errors.New("ordering: bad cut")

// Wedge ends this member's part in the view: from now on the core sends,
// announces and delivers nothing, and drops the records it is given, so
// that what Held reports is final.
func (c *Core) Wedge() {
	c.wedged = true
	c.ready.Records = c.ready.Records[:0]
	c.ready.Control = c.ready.Control[:0]
}

// Wedged reports whether Wedge was called.
func (c *Core) Wedged() bool { return c.wedged }

// Held returns, for every member by rank, the highest sequence number s
// such that this member holds that member's messages 1..s complete (its
// own: every message it sent).
func (c *Core) Held() []uint64 {
	out := make([]uint64, c.cfg.Members)
	for r := range out {
		out[r] = c.prom.Held(r)
	}
	out[c.cfg.Self] = c.seq
	return out
}

// HeldTopics returns, for every topic t and member rank r, at
// [t-1][r], the highest sequence number s such that this member holds
// r's messages 1..s on t complete: zero for the topics it does not
// subscribe to, but its own count of every topic.
func (c *Core) HeldTopics() [][]uint64 {
	if len(c.topics) == 0 {
		return nil
	}
	out := make([][]uint64, len(c.topics))
	for i := range c.topics {
		t := &c.topics[i]
		out[i] = make([]uint64, c.cfg.Members)
		if t.subscribed() {
			for r := range out[i] {
				out[i][r] = c.prom.Held(t.slot + r)
			}
		}
		out[i][c.cfg.Self] = t.seq
	}
	return out
}

// Index returns the global index of the last message to the group
// delivered.
func (c *Core) Index() uint64 { return c.cfg.Start + c.delivered }

// TopicIndex returns the index of topic's last message delivered (its
// Topic.Start if none was, or if this member does not subscribe), and
// zero for a topic that does not exist.
func (c *Core) TopicIndex(topic int) uint64 {
	if topic <= 0 || topic > len(c.topics) {
		return 0
	}
	t := &c.topics[topic-1]
	return t.Start + t.delivered
}

// Cut ends a view: for every channel, how many of its sender's messages
// the view delivers.
type Cut struct {
	// Senders[r] counts member r's messages to the group.
	Senders []uint64
	// Topics[t-1][r] counts member r's messages on topic t; nil in a
	// group without topics.
	Topics [][]uint64
}

// Message is an own message a view did not deliver, to send again in the
// next: on Topic (from 1), or to the group (0).
type Message struct {
	Topic   int
	Payload []byte
}

// Finish ends a wedged view at cut. It returns the deliveries up to the
// cut that this member has not made yet, in the agreed order, and this
// member's own messages beyond the cut, in its send order, which it must
// send again in the next view (those on topics delivered in TotalOrder
// mode excepted: best effort sends nothing again). Every other message
// is discarded.
//
// Every member that delivered messages of the view delivers the rest of
// the cut in the same (stamp, rank, topic, sequence) order, so all of
// them end the view with the same sequence of the group's messages, and
// the subscribers of a topic with the same sequence of its messages: a
// message below a member's commit barrier for its channel is held by
// every receiver of the channel, so it is inside the cut, and the cut is
// the same for everyone.
func (c *Core) Finish(cut Cut) ([]Delivery, []Message, error) {
	if err := c.checkCut(cut); err != nil {
		return nil, nil, err
	}
	type own struct {
		ts  Timestamp
		msg Message
	}
	var resend []own
	saved := c.ready.Deliveries
	c.ready.Deliveries = nil
	c.deliverCut(cut)
	// Keep the messages beyond the cut, which nothing delivers; the core
	// is done. The other members' are discarded, and own ones sent
	// again.
	for slot := range c.chans {
		q := &c.chans[slot]
		for i := q.head; i < len(q.items); i++ {
			m := q.items[i]
			if !m.ok {
				continue
			}
			r, topic := int(q.rank), int(q.topic)
			if r != c.cfg.Self {
				c.stats.Discarded++
			} else if topic == 0 || c.topics[topic-1].Mode == Atomic {
				resend = append(resend, own{m.ts, Message{Topic: topic, Payload: m.payload}})
			}
		}
	}
	c.remerge()
	out := c.ready.Deliveries
	c.ready.Deliveries = saved
	for i := range c.topics {
		t := &c.topics[i]
		if t.subscribed() || t.Mode != Atomic {
			continue
		}
		for s := cut.Topics[i][c.cfg.Self] + 1; s <= t.seq; s++ {
			p, _ := t.own.payload(s) // checkCut made sure it is kept
			resend = append(resend, own{t.own.stamps[s-t.own.first], Message{Topic: i + 1, Payload: p}})
		}
	}
	// In send order: by stamp (an own stamp is never issued twice).
	slices.SortFunc(resend, func(a, b own) int { return cmp.Compare(a.ts, b.ts) })
	var msgs []Message
	for _, o := range resend {
		msgs = append(msgs, o.msg)
	}
	return out, msgs, nil
}

// limit returns how many of the messages of k's channel the cut
// delivers.
func (cut Cut) limit(k key) uint64 {
	if k.topic > 0 {
		return cut.Topics[k.topic-1][k.rank]
	}
	return cut.Senders[k.rank]
}

// checkCut returns an error wrapping ErrCut for a cut this member cannot
// deliver: before Wedge, in a mode other than Atomic, of the wrong shape,
// beyond what it holds, below what it delivered in atomic mode, or below
// the own messages on a topic it does not subscribe to that it kept for
// sending again.
func (c *Core) checkCut(cut Cut) error {
	if !c.wedged {
		return fmt.Errorf("%w: the core is not wedged", ErrCut)
	}
	if c.cfg.Mode != Atomic {
		// Other modes deliver before every member holds a message, so no
		// cut can make their members agree.
		return fmt.Errorf("%w: views end only in atomic mode, not %v", ErrCut, c.cfg.Mode)
	}
	if len(cut.Senders) != c.cfg.Members {
		return fmt.Errorf("%w: %d senders, view has %d", ErrCut, len(cut.Senders), c.cfg.Members)
	}
	if len(cut.Topics) != len(c.topics) {
		return fmt.Errorf("%w: %d topics, view has %d", ErrCut, len(cut.Topics), len(c.topics))
	}
	held := c.Held()
	for r, s := range cut.Senders {
		if s > held[r] {
			return fmt.Errorf("%w: member %d's messages up to %d, only %d held", ErrCut, r, s, held[r])
		}
		if s+1 < c.chans[r].next {
			return fmt.Errorf("%w: member %d's messages up to %d, %d delivered", ErrCut, r, s, c.chans[r].next-1)
		}
	}
	heldTopics := c.HeldTopics()
	for i, tc := range cut.Topics {
		t := &c.topics[i]
		if len(tc) != c.cfg.Members {
			return fmt.Errorf("%w: topic %d has %d senders, view has %d", ErrCut, i+1, len(tc), c.cfg.Members)
		}
		for r, s := range tc {
			if !t.subscribed() && r != c.cfg.Self {
				continue
			}
			if s > heldTopics[i][r] {
				return fmt.Errorf("%w: member %d's messages on topic %d up to %d, only %d held", ErrCut, r, i+1, s, heldTopics[i][r])
			}
			if t.subscribed() && t.Mode == Atomic && s+1 < c.chans[t.slot+r].next {
				return fmt.Errorf("%w: member %d's messages on topic %d up to %d, %d delivered", ErrCut, r, i+1, s, c.chans[t.slot+r].next-1)
			}
		}
		if s := tc[c.cfg.Self]; !t.subscribed() && t.Mode == Atomic && s < t.own.stable {
			return fmt.Errorf("%w: own messages on topic %d up to %d, but %d are held by every subscriber", ErrCut, i+1, s, t.own.stable)
		}
	}
	return nil
}
