package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
)

// Topic is convoy.Topic: see its documentation.
type Topic struct {
	Name        string
	Mode        Mode
	Subscribers []NodeID
}

// Limits on topics.
const (
	// MaxTopics bounds a group's topics: each has a multicast group per
	// member publishing on it (see groupID), and the group ids hold a
	// topic's subscriber set in 12 bits.
	MaxTopics = 1 << 12
	// MaxTopicName bounds a topic's name, in bytes.
	MaxTopicName = 255
)

// Errors about topics.
var (
	// ErrUnknownTopic is returned by Publish and Subscribe for a topic the
	// group does not have.
	ErrUnknownTopic = errors.New("convoy: unknown topic")
	// ErrNotSubscribed is returned by Subscribe, in a group with fixed
	// membership, for a topic this member does not subscribe to (its
	// subscriptions are those of Config.Topics).
	ErrNotSubscribed = errors.New("convoy: not a subscriber of the topic")
	// ErrFixedTopics is returned by Unsubscribe in a group with fixed
	// membership, whose subscriptions are for good.
	ErrFixedTopics = errors.New("convoy: a group with fixed membership has fixed subscriptions")
)

// checkTopics reports the mistakes in c.Topics to bad.
func (c Config) checkTopics(bad func(field, format string, args ...any)) {
	if len(c.Topics) == 0 {
		return
	}
	if c.Mode == Unordered {
		bad("Topics", "topics need atomic or total order mode, not %v", c.Mode)
	}
	if len(c.Topics) > MaxTopics {
		bad("Topics", "%d topics, at most %d", len(c.Topics), MaxTopics)
	}
	members := make(map[NodeID]bool, len(c.Members))
	for _, m := range c.Members {
		members[m.ID] = true
	}
	names := make(map[string]bool, len(c.Topics))
	for i, t := range c.Topics {
		field := fmt.Sprintf("Topics[%d]", i)
		if err := checkTopicName(t.Name); err != nil {
			bad(field+".Name", "%v", err)
		}
		if names[t.Name] {
			bad(field+".Name", "topic %q listed twice", t.Name)
		}
		names[t.Name] = true
		switch {
		case t.Mode != Atomic && t.Mode != TotalOrder:
			bad(field+".Mode", "%v, want atomic or total order", t.Mode)
		case t.Mode != Atomic && c.Durable != nil:
			// Its subscribers may number its messages differently after
			// a failure: no index says what every one of them logged.
			bad(field+".Mode", "%v: a durable group's topics must be atomic", t.Mode)
		}
		seen := make(map[NodeID]bool, len(t.Subscribers))
		for _, id := range t.Subscribers {
			if seen[id] {
				bad(field+".Subscribers", "member %d listed twice", id)
			}
			seen[id] = true
			switch {
			case c.Etcd != nil && id != c.Self:
				bad(field+".Subscribers", "%d: in a view-managed group a member subscribes only itself", id)
			case c.Etcd == nil && !members[id]:
				bad(field+".Subscribers", "%d is not a member", id)
			}
		}
	}
}

// checkTopicName returns why name cannot name a topic, or nil.
func checkTopicName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty topic name", ErrUnknownTopic)
	case len(name) > MaxTopicName:
		return fmt.Errorf("%w: %d-byte topic name, at most %d", ErrUnknownTopic, len(name), MaxTopicName)
	}
	return nil
}

// checkChannel returns an error for a record that came on the wrong
// group of view v: a publish record on a data group (set -1), or any
// other record, or a publish record of a topic of another subscriber
// set, on the topic group of set.
func (v *view) checkChannel(set int, r *ordering.Record) error {
	switch {
	case set < 0 && r.Kind == ordering.KindPublish:
		return fmt.Errorf("%w: publish record on topic %d in a data group", ordering.ErrBadRecord, r.Topic)
	case set < 0:
		return nil
	case r.Kind != ordering.KindPublish:
		return fmt.Errorf("%w: %v record in a topic group", ordering.ErrBadRecord, r.Kind)
	case r.Topic == 0 || int(r.Topic) > len(v.topics) || v.topics[r.Topic-1].set != set:
		return fmt.Errorf("%w: publish record on topic %d in the group of another subscriber set", ordering.ErrBadRecord, r.Topic)
	}
	return nil
}

// topicRecords returns the topics of a group's first view from the
// configured ones.
func topicRecords(topics []Topic) []membership.Topic {
	var out []membership.Topic
	for _, t := range topics {
		rec := membership.Topic{Name: t.Name, Mode: t.Mode.String()}
		for _, id := range t.Subscribers {
			rec.Subscribers = append(rec.Subscribers, uint64(id))
		}
		slices.Sort(rec.Subscribers)
		out = append(out, rec)
	}
	return out
}

// viewTopic is one topic of a view on this member.
type viewTopic struct {
	name string
	// ranks are its subscribers' ranks, increasing; set numbers its
	// subscriber set among the view's distinct non-empty ones (-1 for
	// none): the topics of one set share each publisher's multicast
	// group.
	ranks []int
	set   int
	// subscribed says this member receives it.
	subscribed bool
	mode       Mode
	// sent[r] is how many of rank r's messages on it earlier views
	// delivered (Topic.Sent).
	sent []uint64
}

// initTopics sets up view v's topics from its record: v.topics, the
// distinct subscriber sets, and the topics for the ordering core.
func (v *view) initTopics() ([]ordering.Topic, error) {
	n := len(v.rec.Members)
	var out []ordering.Topic
	v.topicIDs = make(map[string]int, len(v.rec.Topics))
	for i, t := range v.rec.Topics {
		mode, err := ordering.ParseMode(t.Mode)
		if err != nil {
			return nil, fmt.Errorf("view %d topic %q: %w", v.rec.Epoch, t.Name, err)
		}
		vt := viewTopic{name: t.Name, set: -1, sent: make([]uint64, n), mode: mode}
		for _, id := range t.Subscribers {
			r := v.rec.Rank(id)
			if r < 0 {
				return nil, fmt.Errorf("view %d topic %q: subscriber %d is not a member", v.rec.Epoch, t.Name, id)
			}
			vt.ranks = append(vt.ranks, r)
		}
		slices.Sort(vt.ranks)
		vt.ranks = slices.Compact(vt.ranks)
		vt.subscribed = slices.Contains(vt.ranks, v.self)
		if len(t.Sent) == n {
			copy(vt.sent, t.Sent)
		}
		if len(vt.ranks) > 0 {
			vt.set = slices.IndexFunc(v.sets, func(s []int) bool { return slices.Equal(s, vt.ranks) })
			if vt.set < 0 {
				vt.set = len(v.sets)
				v.sets = append(v.sets, vt.ranks)
			}
		}
		v.topics = append(v.topics, vt)
		v.topicIDs[t.Name] = i + 1
		out = append(out, ordering.Topic{Subscribers: vt.ranks, Mode: mode, Start: t.Start})
	}
	if len(v.sets) > MaxTopics {
		return nil, fmt.Errorf("view %d: %d subscriber sets, at most %d", v.rec.Epoch, len(v.sets), MaxTopics)
	}
	return out, nil
}

// topicName returns the name of topic id (from 1) of v; "" for 0.
func (v *view) topicName(id int) string {
	if id <= 0 || id > len(v.topics) {
		return ""
	}
	return v.topics[id-1].name
}

// Publish multicasts payload on topic to the topic's subscribers, in
// the group's one order with every other message. It waits as Send does:
// until the message is accepted, or with WaitStable until every
// subscriber holds it, or with WaitDelivered until this member delivered
// it (if it does not subscribe to the topic, until every subscriber holds
// it). The Receipt numbers the message among this member's on the topic.
//
// It returns ErrUnknownTopic for a topic the group does not have, and
// the errors Send returns.
func (g *Group) Publish(ctx context.Context, topic string, payload []byte, opts ...SendOption) (Receipt, error) {
	if err := checkTopicName(topic); err != nil {
		return Receipt{}, err
	}
	return g.submit(ctx, topic, payload, opts)
}

// canPublishLocked returns ErrUnknownTopic if the current view has no
// topic named topic.
func (g *Group) canPublishLocked(topic string) error {
	if _, ok := g.mu.topics[topic]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	return nil
}

// setTopics records view rec's topic table for Publish and Topics, and
// wakes the Subscribes waiting for a view.
func (g *Group) setTopics(rec *membership.View) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.topics = make(map[string]*membership.Topic, len(rec.Topics))
	for i := range rec.Topics {
		g.mu.topics[rec.Topics[i].Name] = &rec.Topics[i]
	}
	if g.mu.topicsSet != nil {
		close(g.mu.topicsSet)
	}
	g.mu.topicsSet = make(chan struct{})
}

// subscribedLocked reports whether the current view has this member
// subscribe to topic.
func (g *Group) subscribedLocked(topic string) bool {
	t, ok := g.mu.topics[topic]
	return ok && g.mu.epoch != 0 && slices.Contains(t.Subscribers, uint64(g.cfg.Self))
}

// wantTopics records the topics of Config.Topics that this member of a
// view-managed group asks for (see topicRequests).
func (g *Group) wantTopics() {
	g.mu.wanted = make(map[string]membership.TopicRequest)
	if g.cfg.Etcd == nil {
		return
	}
	for _, t := range g.cfg.Topics {
		g.mu.wanted[t.Name] = membership.TopicRequest{
			Topic: t.Name, Mode: t.Mode.String(), Subscribe: slices.Contains(t.Subscribers, g.cfg.Self),
		}
	}
}

// topicRequests returns the topic requests of incarnation self: what
// Config.Topics, Subscribe and Unsubscribe asked for. Every incarnation
// makes them again, as it registers.
func (g *Group) topicRequests(self membership.Member) []membership.TopicRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]membership.TopicRequest, 0, len(g.mu.wanted))
	for _, r := range g.mu.wanted {
		r.Member = self
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b membership.TopicRequest) int { return cmp.Compare(a.Topic, b.Topic) })
	return out
}

// putTopicRequests writes reqs to the store.
func putTopicRequests(ctx context.Context, s *membership.Store, reqs []membership.TopicRequest) error {
	for _, r := range reqs {
		if err := s.PutTopicRequest(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// TopicOption changes how Subscribe creates a topic.
type TopicOption func(*topicOptions)

type topicOptions struct{ mode Mode }

// WithTopicMode sets the mode of a topic that Subscribe creates (default
// Atomic).
func WithTopicMode(m Mode) TopicOption { return func(o *topicOptions) { o.mode = m } }

// TopicInfo is convoy.TopicInfo: a topic of the current view.
type TopicInfo struct {
	Name        string
	Mode        Mode
	Subscribers []NodeID
	Subscribed  bool
}

// Topics returns the current view's topics, by name.
func (g *Group) Topics() []TopicInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]TopicInfo, 0, len(g.mu.topics))
	for _, t := range g.mu.topics {
		mode, _ := ordering.ParseMode(t.Mode)
		info := TopicInfo{Name: t.Name, Mode: mode}
		for _, id := range t.Subscribers {
			info.Subscribers = append(info.Subscribers, NodeID(id))
			info.Subscribed = info.Subscribed || NodeID(id) == g.cfg.Self
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b TopicInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// topicHandlers are the handlers the application attached to topics
// (Subscribe); a topic without one goes to the group's handler.
type topicHandlers struct {
	mu sync.Mutex
	h  map[string]Handler
}

func (t *topicHandlers) get(topic string) Handler {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h[topic]
}

func (t *topicHandlers) set(topic string, h Handler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.h == nil {
		t.h = make(map[string]Handler)
	}
	if h == nil {
		delete(t.h, topic)
		return
	}
	t.h[topic] = h
}

// Subscribe makes this member a subscriber of topic and hands the
// topic's messages to h (nil: to the group's handler).
//
// In a view-managed group it asks for the subscription in etcd — creating
// the topic, in the mode WithTopicMode gives (default Atomic), if the
// group lacks it — and returns once the view that makes this member a
// subscriber is installed: the subscription takes effect at that view's
// start, the point in the group's sequence every member agrees on, and h
// receives the topic's messages from there on. The request stands: a
// member excluded and rejoining as a new incarnation subscribes again.
//
// In a group with fixed membership the subscriptions are those of
// Config.Topics, for good: Subscribe only attaches h, and returns
// ErrNotSubscribed for a topic this member does not subscribe to, and
// ErrUnknownTopic for one the group does not have.
func (g *Group) Subscribe(ctx context.Context, topic string, h Handler, opts ...TopicOption) error {
	if err := checkTopicName(topic); err != nil {
		return err
	}
	if !g.dynamic() {
		g.mu.Lock()
		t, ok := g.mu.topics[topic]
		g.mu.Unlock()
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
		}
		if !slices.Contains(t.Subscribers, uint64(g.cfg.Self)) {
			return fmt.Errorf("%w: %q", ErrNotSubscribed, topic)
		}
		g.handlers.set(topic, h)
		return nil
	}
	o := topicOptions{mode: Atomic}
	for _, opt := range opts {
		opt(&o)
	}
	if o.mode != Atomic && o.mode != TotalOrder {
		return fmt.Errorf("%w: topic mode %v, want atomic or total order", ErrInvalidConfig, o.mode)
	}
	if o.mode != Atomic && g.cfg.Durable != nil {
		return fmt.Errorf("%w: topic mode %v: a durable group's topics must be atomic", ErrInvalidConfig, o.mode)
	}
	g.handlers.set(topic, h)
	return g.requestTopic(ctx, membership.TopicRequest{Topic: topic, Mode: o.mode.String(), Subscribe: true})
}

// Unsubscribe stops this member's subscription to topic, in a
// view-managed group: it asks for it in etcd and returns once the view
// without it is installed (the topic's messages of the views before it
// have been handed out). In a group with fixed membership it returns
// ErrFixedTopics.
func (g *Group) Unsubscribe(ctx context.Context, topic string) error {
	if err := checkTopicName(topic); err != nil {
		return err
	}
	if !g.dynamic() {
		return ErrFixedTopics
	}
	if err := g.requestTopic(ctx, membership.TopicRequest{Topic: topic, Subscribe: false}); err != nil {
		return err
	}
	g.handlers.set(topic, nil)
	return nil
}

// requestTopic records req as this member's wish, writes it for its
// current incarnation, and waits for a view that fulfils it.
func (g *Group) requestTopic(ctx context.Context, req membership.TopicRequest) error {
	g.mu.Lock()
	g.mu.wanted[req.Topic] = req
	g.mu.Unlock()
	g.mem.mu.Lock()
	req.Member = g.mem.mu.self
	g.mem.mu.Unlock()
	if err := g.mem.current().PutTopicRequest(ctx, req); err != nil {
		return fmt.Errorf("convoy: topic request: %w", err)
	}
	for {
		g.mu.Lock()
		done := g.mu.epoch != 0 && g.subscribedLocked(req.Topic) == req.Subscribe
		closed, failed := g.mu.closed, g.mu.err
		set := g.mu.topicsSet
		g.mu.Unlock()
		switch {
		case done:
			return nil
		case closed:
			return ErrClosed
		case failed != nil:
			return failed
		}
		// Out of the views meanwhile, this member asks again as its next
		// incarnation registers.
		select {
		case <-set:
		case <-ctx.Done():
			return ctx.Err()
		case <-g.ctx.Done():
			return cmp.Or(g.Err(), ErrClosed)
		}
	}
}

// ownPublished settles own messages on topic up to seq (numbered as
// Publish numbers them), which every subscriber holds: they leave the
// window, and wake the Publishes waiting for them to be stable (and,
// unless this member subscribes, delivered).
func (g *Group) ownPublished(topic string, from, to uint64, sizes []int, subscribed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, s := 0, from; s <= to; i, s = i+1, s+1 {
		id := msgID{topic, s}
		g.wakeLocked(id, Stable, waitResult{})
		if !subscribed {
			g.wakeLocked(id, Delivered, waitResult{})
		}
		g.mu.inflight--
		g.mu.inflightBytes -= sizes[i]
	}
	g.spaceFreedLocked()
}

// ownTopicDelivered wakes the Publishes waiting for this member to
// deliver own message d on its topic.
func (g *Group) ownTopicDelivered(d *Delivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.wakeLocked(msgID{d.Topic, d.Seq}, Delivered, waitResult{epoch: d.Epoch, index: d.Index})
}

// ownPubs are a view's own messages on one topic not yet held by every
// subscriber: their sizes, oldest first, and the number (as Publish
// numbers them) of the oldest.
type ownPubs struct {
	first uint64
	sizes []int
}

// settlePublished settles the own messages that the core reports held
// by every subscriber of their topics.
func (r *runner) settlePublished(stable []uint64) {
	v := r.v
	for i, s := range stable {
		t := &v.topics[i]
		q := &v.pubs[i]
		seq := t.sent[v.self] + s // numbered as Publish numbers them
		if seq < q.first || len(q.sizes) == 0 {
			continue
		}
		n := min(int(seq-q.first+1), len(q.sizes))
		r.g.ownPublished(t.name, q.first, q.first+uint64(n)-1, q.sizes[:n], t.subscribed)
		q.sizes = q.sizes[n:]
		q.first += uint64(n)
	}
}
