package engine

import (
	"slices"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/persistence"
)

// Durable topics. A member logs the messages of its topics as it
// delivers them (persistence.TopicEntry, numbered by a position of its
// own, each with the group index it follows), and a topic's message is
// handed out once every subscriber of the topic has it on disk: each
// subscriber announces to the topic's other subscribers the topic index
// up to which its log holds the topic's messages (a topic signal), and a
// topic's durable barrier is the minimum its subscribers announced, as
// the group's is over every member's persisted index. A subscriber that
// is slow to sync holds back its own topics only.
//
// Deliveries wait in the one durable queue (runner.durq) in delivery
// order: a member hands out its messages in the group's order, so a
// message waits for the ones it delivered before it, of every topic and
// of the group.
//
// A restart replays every topic entry the log keeps (replay.go), those
// handed out and those not yet: a topic entry is written when the
// ordering delivers the message, which an atomic topic (every durable
// group's) does once every subscriber of the view holds it, so the
// message is within the cut of any later view change, and every
// subscriber that stays delivers it at the same index. A message handed
// out is on every subscriber's disk, so a restart of any of them replays
// it, even if all of them crashed. The log keeps a member's last
// DurableConfig.TopicRetain topic entries.

// topicSignal is the kind, in a control signal's top three bits, of a
// member's persisted index on a topic: then topicSignalTopicBits bits of
// the topic's number in the view (from 1) and topicSignalIndexBits of the
// index, the highest up to which the member's log holds the topic's
// messages. An index beyond those bits is announced as their maximum:
// lower than the truth, which is always safe.
const (
	topicSignal          = 5
	topicSignalTopicBits = 16
	topicSignalIndexBits = 61 - topicSignalTopicBits
)

// topicPersistedImm encodes a persisted index on topic id as a control
// signal.
func topicPersistedImm(id int, idx uint64) uint64 {
	idx = min(idx, 1<<topicSignalIndexBits-1)
	return uint64(topicSignal)<<61 | uint64(id)<<topicSignalIndexBits | idx
}

// parseTopicImm decodes topicPersistedImm's output.
func parseTopicImm(imm uint64) (id int, idx uint64) {
	return int(imm >> topicSignalIndexBits & (1<<topicSignalTopicBits - 1)), imm & (1<<topicSignalIndexBits - 1)
}

// topicDur is the durable barrier of a topic this member subscribes to,
// in one view: over the topic's subscribers, by their place in its ranks.
type topicDur struct {
	d *barrier.Durable
	// synced is the highest index of the topic whose entry this member
	// has synced in the view.
	synced uint64
}

// initTopicDurable sets up the durable barriers of the topics this member
// subscribes to in view v.
func (v *view) initTopicDurable() {
	v.tdur = make([]*topicDur, len(v.topics))
	for i, t := range v.topics {
		if t.subscribed {
			v.tdur[i] = &topicDur{d: barrier.NewDurable(len(t.ranks))}
		}
	}
}

// topicPending is an own topic entry appended to the log and not yet
// known synced.
type topicPending struct {
	pos   uint64
	topic string
	index uint64
}

// topicLog is a member's side of its topic entries.
type topicLog struct {
	// init says the fields below were read from the log.
	init bool
	// pos is the position of the last topic entry appended, first the
	// first one the log keeps.
	pos, first uint64
	// pending are the entries not yet known synced, in position order;
	// firstIdx[topic] the indexes among a topic's, lowest first.
	pending  []topicPending
	firstIdx map[string][]uint64
	// trimWait says the last trim stopped short at entries not yet
	// synced: the next sync asks again, rather than every delivery.
	trimWait bool
}

// topics returns the runner's topic log state, read from the durable log
// the first time.
func (r *runner) topics() *topicLog {
	t := &r.tlog
	if !t.init {
		t.init = true
		t.pos, t.first = r.g.disk.LastTopic(), r.g.disk.FirstTopic()
		t.firstIdx = make(map[string][]uint64)
	}
	return t
}

// appendTopic writes a topic delivery to the durable log, after group
// index after, and returns its position.
func (r *runner) appendTopic(d Delivery, after uint64) uint64 {
	t := r.topics()
	e := persistence.TopicEntry{
		Pos: t.pos + 1, After: after, Topic: d.Topic, Index: d.Index,
		Epoch: d.Epoch, Sender: uint64(d.Sender), Seq: d.Seq, Payload: d.Payload,
	}
	if err := r.g.disk.AppendTopic(e); err != nil {
		if r.diskErr == nil {
			r.g.log.Error("durable log", "topic", d.Topic, "index", d.Index, "err", err)
			r.diskErr = err
		}
		return 0
	}
	t.pos = e.Pos
	t.pending = append(t.pending, topicPending{pos: e.Pos, topic: d.Topic, index: d.Index})
	t.firstIdx[d.Topic] = append(t.firstIdx[d.Topic], d.Index)
	r.trimTopics()
	return e.Pos
}

// trimTopics deletes the oldest topic entries once the log keeps an
// eighth more than DurableConfig.TopicRetain, down to TopicRetain (of
// those synced: the log trims no further, and the next sync asks again).
func (r *runner) trimTopics() {
	t, retain := &r.tlog, uint64(r.g.cfg.Durable.TopicRetain)
	if t.trimWait || t.pos-t.first+1 <= retain+retain/8 {
		return
	}
	if err := r.g.disk.TrimTopics(t.pos - retain); err != nil {
		if r.diskErr == nil {
			r.g.log.Error("durable log: trimming topic entries", "err", err)
			r.diskErr = err
		}
		return
	}
	t.first = r.g.disk.FirstTopic()
	t.trimWait = t.first <= t.pos-retain
}

// announceTopics takes in the topic entries synced since last time and
// tells each subscribed topic's other subscribers how far this member's
// log holds the topic.
func (r *runner) announceTopics() {
	if r.tlog.trimWait {
		r.tlog.trimWait = false
		r.trimTopics()
	}
	v := r.v
	if v == nil || v.tdur == nil {
		return
	}
	t := r.topics()
	synced := r.g.disk.TopicSynced()
	n := 0
	for ; n < len(t.pending) && t.pending[n].pos <= synced; n++ {
		p := t.pending[n]
		if q := t.firstIdx[p.topic]; len(q) > 1 {
			t.firstIdx[p.topic] = q[1:]
		} else {
			delete(t.firstIdx, p.topic)
		}
		if id := v.topicIDs[p.topic]; id > 0 && v.tdur[id-1] != nil {
			v.tdur[id-1].synced = max(v.tdur[id-1].synced, p.index)
		}
	}
	if n > 0 {
		clear(t.pending[:n])
		t.pending = t.pending[n:]
	}
	for i, td := range v.tdur {
		if td == nil {
			continue
		}
		vt := &v.topics[i]
		idx := r.topicPersisted(i, td)
		// Sent every time, as the group's persisted index is: a signal
		// lost with a link that was not up yet is sent again.
		me := slices.Index(vt.ranks, v.self)
		idx = max(idx, td.d.Persisted(me))
		_ = td.d.Announce(me, idx)
		imm := topicPersistedImm(i+1, idx)
		for _, rank := range vt.ranks {
			if rank != v.self {
				_ = v.net.signal(rank, imm)
			}
		}
	}
}

// topicPersisted returns the index up to which this member's log holds
// topic i+1 of the view (td its barrier): below its first entry not yet
// synced, if any, else the highest synced in the view, at least the
// topic's start (the messages before the view, which the view change
// settled).
func (r *runner) topicPersisted(i int, td *topicDur) uint64 {
	v := r.v
	name := v.topics[i].name
	if q := r.tlog.firstIdx[name]; len(q) > 0 {
		return q[0] - 1
	}
	return max(td.synced, v.rec.Topics[i].Start)
}

// topicPersistedFrom applies a topic signal of rank from.
func (r *runner) topicPersistedFrom(from int, imm uint64) {
	v := r.v
	id, idx := parseTopicImm(imm)
	if id <= 0 || id > len(v.tdur) || v.tdur[id-1] == nil {
		r.g.log.Warn("persisted index on a topic", "from", v.ids[from], "topic", id, "err", "not a topic this member subscribes to")
		return
	}
	td := v.tdur[id-1]
	k := slices.Index(v.topics[id-1].ranks, from)
	if k < 0 {
		r.g.log.Warn("persisted index on a topic", "from", v.ids[from], "topic", id, "err", "not a subscriber")
		return
	}
	if err := td.d.Announce(k, max(idx, td.d.Persisted(k))); err != nil {
		r.g.log.Warn("persisted index on a topic", "from", v.ids[from], "topic", id, "err", err)
		return
	}
	r.flushDurable()
}

// resendTopics sends rank again this member's persisted index on each
// topic they both subscribe to (after their control stream broke).
func (v *view) resendTopics(rank int) {
	for i, td := range v.tdur {
		if td == nil || !slices.Contains(v.topics[i].ranks, rank) {
			continue
		}
		me := slices.Index(v.topics[i].ranks, v.self)
		_ = v.net.signal(rank, topicPersistedImm(i+1, td.d.Persisted(me)))
	}
}

// topicDurable reports whether topic delivery it may be handed out: every
// subscriber of its topic in the current view has it on disk. A topic
// this member no longer subscribes to in the view (its delivery came
// before the view changed) has no barrier here: its delivery waits only
// for this member's own log.
func (r *runner) topicDurable(it durItem) bool {
	v := r.v
	if id := v.topicIDs[it.d.Topic]; id > 0 && v.tdur != nil && v.tdur[id-1] != nil {
		return v.tdur[id-1].d.Barrier() >= it.d.Index
	}
	return it.pos <= r.g.disk.TopicSynced()
}

// dropTopics forgets the topic entries not yet known synced, as the
// queues are dropped (the member left its views): they stay in the log,
// which a restart replays, and the entries of a later view follow them.
func (r *runner) dropTopics() {
	if !r.tlog.init {
		return
	}
	r.tlog.pending = nil
	clear(r.tlog.firstIdx)
}
