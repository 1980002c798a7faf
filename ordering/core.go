package ordering

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/internal/plant"
)

// Errors for records the core rejects, besides those of package barrier
// and ErrBadRecord. Rejected records change nothing.
var (
	// ErrClockAhead: a sender's stamps run so far ahead of local time
	// that a window's worth of its records waits for local time to catch
	// up (see Config.MaxAhead).
	ErrClockAhead = errors.New("ordering: peer clock too far ahead")
	// ErrNotAggregating: a tree record in a group without aggregation.
	ErrNotAggregating = errors.New("ordering: aggregation record, but aggregation is off")
)

// Delivery is one message delivered in the agreed order.
type Delivery struct {
	// Epoch and Index place the message in the group's sequence: Index
	// counts deliveries from Config.Start+1 (in Unordered mode it is only
	// this member's count). A message on a topic is placed in the topic's
	// sequence instead: Index counts the topic's messages from its
	// Topic.Start+1, the same on every subscriber.
	Epoch, Index uint64
	// Topic is the message's topic (from 1), or 0 for a message to the
	// whole group.
	Topic   int
	Sender  int
	Seq     uint64
	TS      Timestamp
	Payload []byte
}

// Envelope is a record for one member.
type Envelope struct {
	To     int
	Record Record
}

// Ready is what the runtime must carry out: multicast Records in order,
// each in this member's group (a publish record in its group for the
// record's topic: see KindPublish), send Control, hand Deliveries to the
// application in order. Stable is the highest own sequence number every
// member is known to hold; TopicStable[t-1] the highest of own messages
// on topic t that every subscriber of t is known to hold.
type Ready struct {
	Records     []Record
	Control     []Envelope
	Deliveries  []Delivery
	Stable      uint64
	TopicStable []uint64
}

// Stats counts what the core did and rejected. Discarded counts the
// other members' messages that Finish dropped beyond the view's cut.
type Stats struct {
	Delivered, Beacons, Rejected, Discarded uint64
}

type entry struct {
	ts      Timestamp
	rank    int
	topic   int
	seq     uint64
	payload []byte
}

// Core is one member's ordering state machine. It is not safe for
// concurrent use; the runtime serializes calls. Times passed in are this
// member's monotonic clock in nanoseconds; they never go backwards (a
// smaller value is treated as the last one seen).
//
// Every sender has a channel to the whole group and, in a group with
// topics, one per topic; each numbers its messages from 1. The promises
// (package barrier) are kept per channel this member receives, in
// slots: the group channel of rank r in slot r, the channel of rank r
// for a subscribed topic t in slot topics[t-1].slot+r.
type Core struct {
	cfg   Config
	now   int64
	clock hlc
	// lead is how far ahead of local time a beacon promises (see promise):
	// twice the beacon interval, so that an idle member's promise stays
	// ahead of the clock between its beacons, and at most a quarter of
	// MaxAhead, so that peers apply its records at once.
	lead Timestamp
	// lastOwn is when this member last sent a message of its own (to the
	// group or on a topic).
	lastOwn int64
	seq     uint64 // own messages sent to the group
	prom    *barrier.Promises
	// Exactly one of commit (direct) and tree (aggregated) is set.
	commit *barrier.Commit
	tree   *barrier.Tree
	// chans[slot] holds the channel's complete messages not yet
	// delivered, buffered counts them, and merge orders the channels'
	// next messages for delivery.
	chans     []channelQueue
	buffered  int
	merge     merge
	delivered uint64 // messages to the group delivered
	// topics are the view's topics (Config.Topics); bound[slot] is, for
	// a topic channel this member receives, the count its sender's
	// topic beacons last named.
	topics        []topicState
	bound         []uint64
	scratchBounds []uint64
	// Unordered mode: next sequence to deliver per sender, and early
	// arrivals.
	nextSeq []uint64
	early   []map[uint64]entry
	// own tracks own messages to the group until every member holds them.
	own        ownStamps
	lastSent   int64     // time of the last record multicast to the group
	lastTree   int64     // time of the last aggregation record sent
	announcedT Timestamp // last promise multicast for every channel
	announcedR Timestamp // last frontier multicast
	// maxData is the highest stamp of a peer's message held; maxStamp the
	// highest of any message held, own included.
	maxData, maxStamp Timestamp
	// want is the highest stamp some member (this one included) waits
	// for the barriers to pass (Want, KindWant): this member beacons and
	// announces its frontier for it as for a message of that stamp.
	// wantOwn is the highest this member was asked for by Want, and
	// wantSent the highest it multicast.
	want, wantOwn, wantSent Timestamp
	// frontierKey[j] places the record that last raised member j's
	// announced frontier in j's send order (see frontierOrder).
	frontierKey []uint64
	// ahead[j] holds member j's data and beacon records, in arrival
	// order, from the first one stamped more than MaxAhead beyond local
	// time; they are applied in that order, each once local time comes
	// within MaxAhead of its stamp.
	ahead [][]Record
	// wedged: the view is ending (see Wedge).
	wedged bool
	ready  Ready
	spare  Ready // the slices Ready returned last time, for reuse
	stats  Stats
}

// NewCore returns a member's core at time now.
func NewCore(cfg Config, now int64) (*Core, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	core := &Core{
		cfg:         c,
		now:         now,
		lead:        Timestamp(min(2*c.BeaconInterval, c.MaxAhead/4)),
		lastOwn:     now - int64(c.BeaconInterval),
		nextSeq:     make([]uint64, c.Members),
		frontierKey: make([]uint64, c.Members),
		ahead:       make([][]Record, c.Members),
		early:       make([]map[uint64]entry, c.Members),
		own:         ownStamps{first: 1},
		lastSent:    now,
		lastTree:    now,
	}
	slots := core.initTopics()
	core.prom = barrier.NewPromises(slots, c.Window)
	core.initChans(slots)
	core.bound = make([]uint64, slots)
	if c.Plant.Has(plant.EarlyBeacon) {
		core.prom.PlantEarlyBeacons()
	}
	for i := range core.nextSeq {
		core.nextSeq[i] = 1
	}
	if c.FanOut >= 2 {
		core.tree, err = barrier.NewTree(c.Self, c.Members, c.FanOut)
		if err != nil {
			return nil, err
		}
	} else {
		core.commit = barrier.NewCommit(c.Members)
	}
	return core, nil
}

// advance moves local time to now and applies the records held for
// their stamps that it lets through; it returns why it rejected any of
// them.
func (c *Core) advance(now int64) error {
	c.now = max(c.now, now)
	err := c.release()
	// Promise, for this member's own future messages, the lowest stamp the
	// clock can still issue.
	c.promiseOwn(c.clock.peek(c.now))
	return err
}

// promiseOwn records, on this member's own channels, that nothing of its
// own is stamped below p from now on.
func (c *Core) promiseOwn(p Timestamp) {
	_ = c.prom.Beacon(c.cfg.Self, c.seq, p)
	for i := range c.topics {
		if t := &c.topics[i]; t.subscribed() {
			_ = c.prom.Beacon(t.slot+c.cfg.Self, t.seq, p)
		}
	}
}

// promise returns the stamp a beacon multicast now promises: local time
// plus the lead (or, if the clock is further on, the lowest stamp it can
// still issue), to which the clock then holds this member's own stamps.
// A peer's message stamped below the standing promises of the others
// passes a receiver's frontier as it arrives, without waiting for their
// beacons in reaction to it: with one sender, the others idle, its
// messages are ordered in one message delay and committed in two. The
// cost falls on a member that sends after beaconing: its messages are
// stamped up to the lead ahead of local time, so the others' frontiers
// wait for their beacons in reaction to it, as they would without the
// lead. So a member that sent a message of its own within the last beacon
// interval promises no lead: its beacons (those announcing its frontier
// for its own messages' commit) leave its stamps on its clock, below the
// others' promises.
func (c *Core) promise() Timestamp {
	var p Timestamp
	if c.now-c.lastOwn < int64(c.cfg.BeaconInterval) {
		p = c.clock.peek(c.now)
	} else {
		p = c.clock.lead(c.now, c.lead)
	}
	c.promiseOwn(p)
	return p
}

// limit is the highest stamp a peer's record may carry to be applied
// now.
func (c *Core) limit() Timestamp {
	return Timestamp(max(c.now, 0)) + Timestamp(c.cfg.MaxAhead)
}

// release applies, sender by sender and in arrival order, the held
// records whose stamps local time has come within MaxAhead of.
func (c *Core) release() error {
	var errs []error
	limit := c.limit()
	for from, q := range c.ahead {
		n := 0
		for n < len(q) && q[n].TS <= limit {
			if err := c.step(from, q[n]); err != nil {
				c.stats.Rejected++
				errs = append(errs, fmt.Errorf("record %v from member %d: %w", q[n].Kind, from, err))
			}
			n++
		}
		if n > 0 {
			clear(q[:n])
			c.ahead[from] = q[n:]
		}
	}
	return errors.Join(errs...)
}

// hold keeps a record of member from until local time comes within
// MaxAhead of its stamp, behind the records of from held already.
func (c *Core) hold(from int, r Record) error {
	q := c.ahead[from]
	if uint64(len(q)) >= c.cfg.Window {
		return fmt.Errorf("%w: stamp %d, local time %d, %d records held", ErrClockAhead, r.TS, c.now, len(q))
	}
	c.ahead[from] = append(q, r)
	return nil
}

// Send stamps an application message at time now and queues it for
// multicast. It returns the message's sequence number and stamp.
//
// Send must not be called once the core is wedged; it then returns zero.
func (c *Core) Send(now int64, payload []byte) (uint64, Timestamp) {
	if c.wedged {
		return 0, 0
	}
	c.advance(now)
	ts := c.clock.stamp(c.now)
	c.lastOwn = c.now
	c.seq++
	if err := c.prom.Hold(c.cfg.Self, c.seq, ts); err != nil {
		panic(fmt.Sprintf("ordering: own message rejected: %v", err)) // the clock guarantees it cannot be
	}
	c.own.add(ts, payload, false)
	c.maxStamp = max(c.maxStamp, ts)
	c.multicast(Record{Kind: KindData, Seq: c.seq, TS: ts, Payload: payload})
	c.accept(entry{ts: ts, rank: c.cfg.Self, seq: c.seq, payload: payload})
	c.deliver()
	return c.seq, ts
}

// multicast queues r for this member's group, with the frontier attached
// in the direct scheme. A publish record reaches only its topic's
// subscribers: it carries no frontier and promises nothing to the
// others.
func (c *Core) multicast(r Record) {
	c.ready.Records = append(c.ready.Records, r)
	if r.Kind == KindPublish {
		return
	}
	if c.cfg.Mode != Unordered && c.commit != nil {
		c.ready.Records[len(c.ready.Records)-1].Frontier = c.prom.Frontier()
		c.announcedR = c.prom.Frontier()
	}
	c.lastSent = c.now
	switch {
	case r.Kind == KindData && len(c.topics) == 0:
		// A message is its sender's promise, for its one channel.
		c.announcedT = max(c.announcedT, r.TS+1)
	case r.Kind == KindBeacon || r.Kind == KindTopicBeacon:
		c.announcedT = max(c.announcedT, r.TS)
	}
}

// Want asks for this member's barriers to pass ts soon (a linearizable
// read waits for its delivery barrier to pass its receive frontier): the
// core multicasts a want record within BeaconGap, and every member
// beacons and announces its frontier for ts as it would for a message
// stamped ts, so that the barriers pass it in about two message delays
// rather than at the idle pace of one beacon per BeaconInterval. It
// sends nothing in Unordered mode or once the core is wedged, nor for a
// stamp no higher than one it asked for already. Want needs no time: it
// only raises the stamp asked for, and the records go out at the Tick
// that Deadline then names.
func (c *Core) Want(ts Timestamp) {
	if c.wedged || c.cfg.Mode == Unordered || ts <= c.wantOwn {
		return
	}
	c.wantOwn = ts
	c.want = max(c.want, ts)
}

// Step applies a record received from member from at time now. A record
// that breaks the protocol is rejected with an error and changes nothing.
// Step delivers what the record lets through but sends nothing: beacons
// and aggregation records in reaction go out at the next Tick, which the
// runtime calls after each batch of records, so that a busy member reacts
// once per batch rather than once per record.
//
// A data or beacon record stamped more than MaxAhead beyond local time
// waits, with the records of its sender that follow it, until local time
// comes within MaxAhead of its stamp: the Step, Tick or Send at that time
// applies it. If it then breaks the protocol, a Step returns that error
// with its own record's; a Tick or Send counts it in Stats.Rejected.
//
// Once the core is wedged, records are dropped: the final report must not
// change.
func (c *Core) Step(now int64, from int, r Record) error {
	if c.wedged {
		return nil
	}
	errs := []error{c.advance(now)}
	var err error
	if c.waits(from, r) {
		err = c.hold(from, r)
	} else {
		err = c.step(from, r)
	}
	if err != nil {
		c.stats.Rejected++
		errs = append(errs, fmt.Errorf("record %v from member %d: %w", r.Kind, from, err))
	}
	c.deliver()
	return errors.Join(errs...)
}

// waits reports whether a record from member from must wait for local
// time: a data or beacon record stamped more than MaxAhead beyond it, or
// one behind such a record (a sender's records apply in their order).
// Clock skew between members thus costs latency, never records; the
// hybrid clock makes this member's own stamps follow the record's once
// it applies it.
func (c *Core) waits(from int, r Record) bool {
	if r.Kind != KindData && r.Kind != KindBeacon && r.Kind != KindWant || from < 0 || from >= c.cfg.Members || from == c.cfg.Self {
		return false
	}
	return len(c.ahead[from]) > 0 || r.TS > c.limit()
}

func (c *Core) step(from int, r Record) error {
	if from < 0 || from >= c.cfg.Members || from == c.cfg.Self {
		return fmt.Errorf("%w: rank %d", barrier.ErrUnknownMember, from)
	}
	topics := len(c.topics) > 0
	switch {
	case r.Kind == KindBeacon && topics:
		return fmt.Errorf("%w: a beacon without topic bounds in a group with topics", ErrBadRecord)
	case (r.Kind == KindTopicBeacon || r.Kind == KindPublish) && !topics:
		return fmt.Errorf("%w: %v record in a group without topics", ErrBadRecord, r.Kind)
	}
	switch r.Kind {
	case KindPublish:
		return c.stepPublish(from, r)
	case KindData, KindBeacon, KindTopicBeacon, KindWant:
		direct := c.commit != nil && c.cfg.Mode != Unordered
		key := frontierOrder(r)
		// A record overtaken by later ones (a large message) carries an
		// older frontier; one that is not must not go backwards.
		if direct && key >= c.frontierKey[from] && r.Frontier < c.commit.Announced(from) {
			return fmt.Errorf("%w: member %d frontier %d after %d", barrier.ErrBackwards, from, r.Frontier, c.commit.Announced(from))
		}
		if r.Kind == KindData {
			if len(r.Payload) > c.cfg.MaxPayload {
				return fmt.Errorf("%w: %d-byte payload", ErrBadRecord, len(r.Payload))
			}
			if err := c.prom.Hold(from, r.Seq, r.TS); err != nil {
				return err
			}
			c.accept(entry{ts: r.TS, rank: from, seq: r.Seq, payload: r.Payload})
			c.maxData = max(c.maxData, r.TS)
			c.maxStamp = max(c.maxStamp, r.TS)
		} else if r.Kind == KindTopicBeacon {
			if err := c.stepTopicBeacon(from, r); err != nil {
				return err
			}
		} else if r.Kind == KindWant {
			if c.cfg.Mode != Unordered {
				c.want = max(c.want, r.TS)
			}
		} else if err := c.prom.Beacon(from, r.Seq, r.TS); err != nil {
			return err
		}
		if r.Kind == KindData || r.Kind == KindWant {
			// A promise is not observed: this member's stamps stay below
			// the others' standing promises (see promise).
			c.clock.observe(r.TS)
		}
		if direct && r.Frontier > c.commit.Announced(from) {
			_ = c.commit.Announce(from, r.Frontier) // checked above
			c.frontierKey[from] = max(c.frontierKey[from], key)
		}
	case KindUp:
		if c.tree == nil {
			return ErrNotAggregating
		}
		return c.tree.Report(from, r.TS)
	case KindDown:
		if c.tree == nil {
			return ErrNotAggregating
		}
		return c.tree.SetBarrier(from, r.TS)
	default:
		return fmt.Errorf("%w: kind %v", ErrBadRecord, r.Kind)
	}
	return nil
}

// frontierOrder places a record in its sender's send order to the
// group: data #n, then the beacons sent after it (which carry n), then
// data #n+1.
func frontierOrder(r Record) uint64 {
	if r.Kind == KindBeacon || r.Kind == KindTopicBeacon || r.Kind == KindWant {
		return 2*r.Seq + 1
	}
	return 2 * r.Seq
}

// Tick tells the core that time now has come: it beacons if this member
// has been silent for a beacon interval, or for a beacon gap while others
// wait on its promise or frontier, and multicasts what Want asked for.
func (c *Core) Tick(now int64) {
	if c.wedged {
		c.now = max(c.now, now) // Deadline stays ahead of the caller's clock
		return
	}
	c.advance(now)
	c.react()
	c.deliver()
}

// wantsBeacon reports whether peers wait on a promise or frontier this
// member has not announced: a peer's message is stamped at or above the
// last promise (their frontiers wait for a higher one), or the frontier
// moved while some message this member knows of is not yet below the
// announced one (the commit barrier waits for it); a stamp some member
// waits for the barriers to pass (Want) counts as such a message.
// Otherwise beacons keep the idle pace of one per interval. In a group
// with topics a message promises only for its own channel, so an own
// message stamped at or above the last promise wants one too: the other
// channels of this member that reach its receivers wait for it.
func (c *Core) wantsBeacon() bool {
	if c.cfg.Mode == Unordered {
		return false
	}
	if c.maxData >= c.announcedT || c.want >= c.announcedT || len(c.topics) > 0 && c.maxStamp >= c.announcedT {
		return true
	}
	return c.commit != nil && c.announcedR <= max(c.maxStamp, c.want) && c.prom.Frontier() > c.announcedR
}

// treeGap is how long aggregation records wait after the last ones: a gap
// while some known message is not yet below what this member told its
// tree neighbours, an interval otherwise.
func (c *Core) treeGap() int64 {
	if c.tree.Sent() <= max(c.maxStamp, c.want) {
		return int64(c.cfg.BeaconGap)
	}
	return int64(c.cfg.BeaconInterval)
}

func (c *Core) react() {
	if c.cfg.Mode == Unordered {
		return
	}
	silent := c.now - c.lastSent
	wantDue := c.wantOwn > c.wantSent && silent >= int64(c.cfg.BeaconGap)
	if silent >= int64(c.cfg.BeaconInterval) || (silent >= int64(c.cfg.BeaconGap) && c.wantsBeacon()) {
		c.stats.Beacons++
		if len(c.topics) > 0 {
			c.multicast(Record{Kind: KindTopicBeacon, Seq: c.seq, TS: c.promise(), Bounds: c.topicBounds()})
		} else {
			c.multicast(Record{Kind: KindBeacon, Seq: c.seq, TS: c.promise()})
		}
	}
	if wantDue {
		c.wantSent = c.wantOwn
		c.multicast(Record{Kind: KindWant, Seq: c.seq, TS: c.wantOwn})
	}
	if c.tree != nil {
		c.tree.SetOwn(c.prom.Frontier())
		if c.tree.Pending() && c.now-c.lastTree >= c.treeGap() {
			c.lastTree = c.now
			if f, ok := c.tree.Up(); ok {
				c.ready.Control = append(c.ready.Control, Envelope{To: c.tree.Parent(), Record: Record{Kind: KindUp, TS: f}})
			}
			if b, ok := c.tree.Down(); ok {
				for _, ch := range c.tree.Children() {
					c.ready.Control = append(c.ready.Control, Envelope{To: ch, Record: Record{Kind: KindDown, TS: b}})
				}
			}
		}
	}
}

// Deadline returns the time at which Tick next has something to do.
func (c *Core) Deadline() int64 {
	if c.wedged {
		return c.now + int64(time.Hour)
	}
	if c.cfg.Mode == Unordered {
		return c.now + int64(c.cfg.BeaconInterval)
	}
	d := c.lastSent + int64(c.cfg.BeaconInterval)
	if c.wantsBeacon() || c.wantOwn > c.wantSent {
		d = c.lastSent + int64(c.cfg.BeaconGap)
	}
	if c.tree != nil {
		c.tree.SetOwn(c.prom.Frontier())
		if c.tree.Pending() {
			d = min(d, c.lastTree+c.treeGap())
		}
	}
	for _, q := range c.ahead {
		if len(q) > 0 {
			// q[0].TS > c.limit() ≥ MaxAhead: no underflow.
			d = min(d, int64(min(q[0].TS-Timestamp(c.cfg.MaxAhead), math.MaxInt64)))
		}
	}
	return d
}

// accept takes a complete message; in Unordered mode it is delivered as
// soon as its sender's earlier messages are.
func (c *Core) accept(e entry) {
	if c.cfg.Mode != Unordered {
		c.holdMessage(c.slotOf(e.rank, e.topic), e.seq, e.ts, e.payload)
		return
	}
	if e.seq != c.nextSeq[e.rank] {
		if c.early[e.rank] == nil {
			c.early[e.rank] = make(map[uint64]entry)
		}
		c.early[e.rank][e.seq] = e
		return
	}
	for {
		c.emit(e)
		c.nextSeq[e.rank]++
		next, ok := c.early[e.rank][c.nextSeq[e.rank]]
		if !ok {
			return
		}
		delete(c.early[e.rank], next.seq)
		e = next
	}
}

// Barrier returns the timestamp below which this member delivers the
// group's messages (a topic's may wait for more: see TopicBarrier).
func (c *Core) Barrier() Timestamp {
	if c.cfg.Mode == TotalOrder {
		return c.prom.Frontier()
	}
	return c.commitBarrier()
}

func (c *Core) deliver() {
	if c.cfg.Mode == Unordered {
		c.own.stable = c.seq
		c.ready.Stable = c.seq
		return
	}
	b := c.Barrier()
	if len(c.topics) > 0 {
		c.deliverTopics(b)
		return
	}
	c.deliverBelow(b)
	if c.cfg.Mode == TotalOrder {
		b = c.commitBarrier()
	}
	if len(c.own.stamps) > 0 && c.own.stamps[0] < b {
		c.own.settle(b)
	}
	c.ready.Stable = c.own.stable
}

// deliverTopics delivers in a group with topics: the held messages in
// order, each once its channel's barrier has passed it (b for the
// group's), and stops at the first that must wait, so that every member
// delivers what it receives in the one order.
func (c *Core) deliverTopics(b Timestamp) {
	r := c.prom.Frontier()
	if c.tree != nil {
		c.tree.SetOwn(r)
	} else {
		_ = c.commit.Announce(c.cfg.Self, r)
	}
	for i := range c.topics {
		t := &c.topics[i]
		t.commit = c.topicCommit(t)
		t.barrier = min(t.commit, r)
		if t.Mode == TotalOrder && t.subscribed() {
			t.barrier = r
		}
	}
	for len(c.merge) > 0 {
		k := c.merge[0].key
		topic := int(k.topic)
		if topic == 0 && k.ts >= b || topic > 0 && k.ts >= c.topics[topic-1].barrier {
			break
		}
		_, p := c.takeMin(math.MaxUint64)
		c.emit(entry{ts: k.ts, rank: int(k.rank), topic: topic, seq: k.seq, payload: p})
	}
	if c.cfg.Mode == TotalOrder {
		b = c.commitBarrier()
	}
	c.own.settle(b)
	c.ready.Stable = c.own.stable
	// Nothing announced a frontier since the barriers were computed.
	stable := c.ready.TopicStable[:0]
	for i := range c.topics {
		t := &c.topics[i]
		t.own.settle(t.commit)
		stable = append(stable, t.own.stable)
	}
	c.ready.TopicStable = stable
}

// topicCommit returns topic t's commit barrier: below it, every
// subscriber of t holds every message of t. With frontiers announced to
// every member it is the minimum over t's subscribers (infinite for a
// topic without any); through the aggregation tree, the group's commit
// barrier, which is no higher. This member's own frontier must be
// announced first (commitBarrier, or deliverTopics, does).
func (c *Core) topicCommit(t *topicState) Timestamp {
	if c.tree != nil {
		return c.tree.Barrier()
	}
	b := barrier.Infinity
	for _, s := range t.Subscribers {
		b = min(b, c.commit.Announced(s))
	}
	return b
}

// TopicBarrier returns the timestamp below which this member delivers
// the messages of topic (from 1), as of the last record or tick; zero
// for a topic that does not exist.
func (c *Core) TopicBarrier(topic int) Timestamp {
	if topic <= 0 || topic > len(c.topics) || c.cfg.Mode == Unordered {
		return 0
	}
	t := &c.topics[topic-1]
	r := c.prom.Frontier()
	if t.Mode == TotalOrder && t.subscribed() {
		return r
	}
	_ = c.commitBarrier() // announces this member's own frontier
	return min(r, c.topicCommit(t))
}

// CommitBarrier returns the barrier below which every member holds every
// message (1Pipe's commit barrier), as of the last record or tick: the
// delivery barrier of Atomic mode, and the one below which messages are
// stable in every mode that orders.
func (c *Core) CommitBarrier() Timestamp {
	r := c.prom.Frontier()
	if c.tree != nil {
		return min(r, c.tree.Barrier())
	}
	return min(r, c.commit.Barrier())
}

// commitBarrier returns the barrier below which every member holds every
// message, once this member's own receive frontier is announced.
func (c *Core) commitBarrier() Timestamp {
	r := c.prom.Frontier()
	if c.tree != nil {
		c.tree.SetOwn(r)
		return min(r, c.tree.Barrier())
	}
	_ = c.commit.Announce(c.cfg.Self, r)
	return c.commit.Barrier()
}

func (c *Core) emit(e entry) {
	c.stats.Delivered++
	index := uint64(0)
	if e.topic == 0 {
		c.delivered++
		index = c.cfg.Start + c.delivered
	} else {
		t := &c.topics[e.topic-1]
		t.delivered++
		index = t.Start + t.delivered
	}
	c.ready.Deliveries = append(c.ready.Deliveries, Delivery{
		Epoch: c.cfg.Epoch, Index: index, Topic: e.topic, Sender: e.rank, Seq: e.seq, TS: e.ts, Payload: e.payload,
	})
}

// HasReady reports whether Ready has anything to carry out.
func (c *Core) HasReady() bool {
	return len(c.ready.Records) > 0 || len(c.ready.Control) > 0 || len(c.ready.Deliveries) > 0
}

// Ready returns what the runtime must carry out and clears it. The
// returned slices stay valid until the next call to Ready.
func (c *Core) Ready() Ready {
	rd := c.ready
	clear(c.spare.Records)
	clear(c.spare.Deliveries)
	c.ready = Ready{
		Records:    c.spare.Records[:0],
		Control:    c.spare.Control[:0],
		Deliveries: c.spare.Deliveries[:0],
		Stable:     rd.Stable,
	}
	if len(rd.TopicStable) > 0 {
		c.ready.TopicStable = append(c.spare.TopicStable[:0], rd.TopicStable...)
	}
	c.spare = rd
	return rd
}

// Stats returns the core's counters.
func (c *Core) Stats() Stats { return c.stats }

// Frontier returns this member's receive frontier.
func (c *Core) Frontier() Timestamp { return c.prom.Frontier() }

// Buffered returns how many complete messages wait for the barrier.
func (c *Core) Buffered() int { return c.buffered }

// Ahead returns how many records of peers wait for local time to come
// within MaxAhead of their stamps.
func (c *Core) Ahead() int {
	n := 0
	for _, q := range c.ahead {
		n += len(q)
	}
	return n
}
