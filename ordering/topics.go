package ordering

import (
	"errors"
	"fmt"
	"slices"

	"github.com/convoy-gcs/convoy/barrier"
)

// Topic is one topic of a view, as the core sees it: who receives it and
// how it is delivered. Topic t of Config.Topics (t from 1) is Topics[t-1];
// every member of the view holds the same list.
type Topic struct {
	// Subscribers lists the ranks that receive the topic, in increasing
	// order. A member publishes on any topic, subscribed or not.
	Subscribers []int
	// Mode is Atomic (a message is delivered once every subscriber holds
	// it) or TotalOrder (below the subscriber's own receive frontier).
	Mode Mode
	// Start is the topic index of the topic's last message delivered
	// before this view: the view's first message of the topic gets
	// Start+1 (Delivery.Index).
	Start uint64
}

// ErrTopic is wrapped by the errors for a topic that does not exist, or a
// publish record at a member that does not subscribe to its topic.
var ErrTopic = errors.New("ordering: unknown topic")

// topicState is one topic's part of a core.
type topicState struct {
	Topic
	// slot is the promise slot of rank 0's channel for the topic
	// (rank r's is slot+r), or -1 when this member does not subscribe.
	slot int
	// delivered counts the topic's messages delivered in the view.
	delivered uint64
	// seq counts own messages published on the topic; bounded is the
	// count the last topic beacon named.
	seq, bounded uint64
	// own tracks own messages on the topic until every subscriber holds
	// them.
	own ownStamps
	// commit and barrier are the topic's commit and delivery barriers
	// during a deliver pass.
	commit, barrier Timestamp
}

// subscribed reports whether this member receives the topic.
func (t *topicState) subscribed() bool { return t.slot >= 0 }

// ownStamps tracks a channel's own messages not yet known held by every
// receiver: their stamps in send order and, for a topic this member does
// not subscribe to, their payloads (a view change may have to send them
// again; a subscribed topic's wait in the core's buffer).
type ownStamps struct {
	stamps   []Timestamp
	payloads [][]byte // nil, or one per stamp
	first    uint64   // sequence number of stamps[0]
	stable   uint64   // every message up to it is held everywhere
}

func (o *ownStamps) add(ts Timestamp, payload []byte, keep bool) {
	if o.first == 0 {
		o.first = 1
	}
	o.stamps = append(o.stamps, ts)
	if keep {
		o.payloads = append(o.payloads, payload)
	}
}

// settle marks stable the messages stamped below b.
func (o *ownStamps) settle(b Timestamp) {
	n := 0
	for n < len(o.stamps) && o.stamps[n] < b {
		n++
	}
	if n == 0 {
		return
	}
	o.stamps = o.stamps[n:]
	if o.payloads != nil {
		clear(o.payloads[:n])
		o.payloads = o.payloads[n:]
	}
	o.first += uint64(n)
	o.stable = o.first - 1
}

// payload returns own message seq, kept because it is not yet stable.
func (o *ownStamps) payload(seq uint64) ([]byte, bool) {
	if seq < o.first || seq-o.first >= uint64(len(o.payloads)) {
		return nil, false
	}
	return o.payloads[seq-o.first], true
}

// checkTopics validates the topic list of a view of n members.
func checkTopics(topics []Topic, n int, mode Mode) error {
	if len(topics) == 0 {
		return nil
	}
	if mode == Unordered {
		return errors.New("ordering: topics need an ordered mode, not unordered")
	}
	if len(topics) > MaxTopics {
		return fmt.Errorf("ordering: %d topics, at most %d", len(topics), MaxTopics)
	}
	for i, t := range topics {
		if t.Mode != Atomic && t.Mode != TotalOrder {
			return fmt.Errorf("ordering: topic %d in mode %v, want atomic or total", i+1, t.Mode)
		}
		for k, r := range t.Subscribers {
			if r < 0 || r >= n {
				return fmt.Errorf("ordering: topic %d subscriber rank %d in a group of %d", i+1, r, n)
			}
			if k > 0 && r <= t.Subscribers[k-1] {
				return fmt.Errorf("ordering: topic %d subscribers not in increasing order", i+1)
			}
		}
	}
	return nil
}

// MaxTopics bounds the topics of a view (a topic is a uint32 on the wire,
// and every member keeps a channel per subscribed topic and sender).
const MaxTopics = 1 << 16

// initTopics sets up the topic channels this member receives: promise
// slots after the group channel's (ranks 0..Members-1), Members per
// subscribed topic. It returns the number of slots.
func (c *Core) initTopics() int {
	n := c.cfg.Members
	slots := n
	c.topics = make([]topicState, len(c.cfg.Topics))
	for i, t := range c.cfg.Topics {
		ts := &c.topics[i]
		ts.Topic = t
		ts.Subscribers = slices.Clone(t.Subscribers)
		ts.slot = -1
		if slices.Contains(t.Subscribers, c.cfg.Self) {
			ts.slot = slots
			slots += n
		}
	}
	return slots
}

// topic returns topic id's state, or an error wrapping ErrTopic.
func (c *Core) topic(id uint32) (*topicState, error) {
	if id == 0 || uint64(id) > uint64(len(c.topics)) {
		return nil, fmt.Errorf("%w: topic %d of %d", ErrTopic, id, len(c.topics))
	}
	return &c.topics[id-1], nil
}

// slotOf returns the promise slot of rank's channel for topic (0: the
// group's channel), or -1 if this member does not receive it.
func (c *Core) slotOf(rank int, topic int) int {
	if topic == 0 {
		return rank
	}
	t := &c.topics[topic-1]
	if !t.subscribed() {
		return -1
	}
	return t.slot + rank
}

// Publish stamps an application message on topic (from 1) at time now
// and queues it for multicast to the topic's subscribers. It returns the
// message's sequence number among this member's on the topic, and its
// stamp; an error wrapping ErrTopic for a topic that does not exist.
//
// Publish must not be called once the core is wedged; it then returns
// zero.
func (c *Core) Publish(now int64, topic int, payload []byte) (uint64, Timestamp, error) {
	if topic <= 0 || topic > len(c.topics) {
		return 0, 0, fmt.Errorf("%w: topic %d of %d", ErrTopic, topic, len(c.topics))
	}
	if c.wedged {
		return 0, 0, nil
	}
	c.advance(now)
	t := &c.topics[topic-1]
	ts := c.clock.stamp(c.now)
	c.lastOwn = c.now
	t.seq++
	t.own.add(ts, payload, !t.subscribed())
	c.maxStamp = max(c.maxStamp, ts)
	c.multicast(Record{Kind: KindPublish, Topic: uint32(topic), Seq: t.seq, TS: ts, Payload: payload})
	if t.subscribed() {
		if err := c.prom.Hold(t.slot+c.cfg.Self, t.seq, ts); err != nil {
			panic(fmt.Sprintf("ordering: own message rejected: %v", err)) // the clock guarantees it cannot be
		}
		c.accept(entry{ts: ts, rank: c.cfg.Self, topic: topic, seq: t.seq, payload: payload})
	}
	c.deliver()
	return t.seq, ts, nil
}

// stepPublish applies a publish record of member from.
func (c *Core) stepPublish(from int, r Record) error {
	t, err := c.topic(r.Topic)
	if err != nil {
		return err
	}
	if !t.subscribed() {
		return fmt.Errorf("%w: topic %d, which this member does not subscribe to", ErrTopic, r.Topic)
	}
	if len(r.Payload) > c.cfg.MaxPayload {
		return fmt.Errorf("%w: %d-byte payload", ErrBadRecord, len(r.Payload))
	}
	if err := c.prom.Hold(t.slot+from, r.Seq, r.TS); err != nil {
		return err
	}
	c.accept(entry{ts: r.TS, rank: from, topic: int(r.Topic), seq: r.Seq, payload: r.Payload})
	c.maxData = max(c.maxData, r.TS)
	c.maxStamp = max(c.maxStamp, r.TS)
	c.clock.observe(r.TS)
	return nil
}

// stepTopicBeacon applies a topic beacon of member from: its promise
// binds the group channel to r.Seq and each subscribed topic's channel
// to the count the sender's topic beacons last named for it. The record
// is checked whole before anything applies.
func (c *Core) stepTopicBeacon(from int, r Record) error {
	for i, b := range r.Bounds {
		t, err := c.topic(b.Topic)
		if err != nil {
			return err
		}
		if i > 0 && b.Topic <= r.Bounds[i-1].Topic {
			return fmt.Errorf("%w: bounds on topics %d then %d", ErrBadRecord, r.Bounds[i-1].Topic, b.Topic)
		}
		if t.subscribed() && b.Seq < c.bound[t.slot+from] {
			return fmt.Errorf("%w: member %d bound topic %d to %d after %d", barrier.ErrBackwards, from, b.Topic, b.Seq, c.bound[t.slot+from])
		}
	}
	// bounds[i] is the count topic i+1's channel is bound to, for the
	// subscribed topics.
	bounds := c.scratchBounds[:0]
	k := 0
	for i := range c.topics {
		t := &c.topics[i]
		var n uint64
		if t.subscribed() {
			n = c.bound[t.slot+from]
		}
		for ; k < len(r.Bounds) && int(r.Bounds[k].Topic) <= i+1; k++ {
			if int(r.Bounds[k].Topic) == i+1 && t.subscribed() {
				n = r.Bounds[k].Seq
			}
		}
		bounds = append(bounds, n)
	}
	c.scratchBounds = bounds
	if err := c.prom.CheckBeacon(from, r.Seq, r.TS); err != nil {
		return err
	}
	for i := range c.topics {
		if t := &c.topics[i]; t.subscribed() {
			if err := c.prom.CheckBeacon(t.slot+from, bounds[i], r.TS); err != nil {
				return fmt.Errorf("topic %d: %w", i+1, err)
			}
		}
	}
	_ = c.prom.Beacon(from, r.Seq, r.TS) // checked above
	for i := range c.topics {
		if t := &c.topics[i]; t.subscribed() {
			c.bound[t.slot+from] = bounds[i]
			_ = c.prom.Beacon(t.slot+from, bounds[i], r.TS) // checked above
		}
	}
	return nil
}

// topicBounds returns the bounds of this member's next topic beacon: the
// topics it published on since its last one, with their counts.
func (c *Core) topicBounds() []TopicSeq {
	var out []TopicSeq
	for i := range c.topics {
		t := &c.topics[i]
		if t.seq > t.bounded {
			out = append(out, TopicSeq{Topic: uint32(i + 1), Seq: t.seq})
			t.bounded = t.seq
		}
	}
	return out
}
