package convoy

import (
	"context"

	"github.com/convoy-gcs/convoy/internal/engine"
)

// Topic declares one of a group's topics (Config.Topics): pub/sub within
// the group, in the group's one order.
type Topic struct {
	// Name names the topic: not empty, at most MaxTopicName bytes,
	// unique in the group.
	Name string
	// Mode is how the topic's messages are delivered: Atomic (the
	// default; a message is delivered once every subscriber holds it) or
	// TotalOrder (best effort, below the subscriber's own receive
	// frontier: at a failure its subscribers may deliver different
	// subsets, nothing is sent again, and its indexes agree only within
	// a failure-free view). A durable group's topics are Atomic.
	Mode Mode
	// Subscribers lists the members that receive the topic's messages;
	// only their links carry its bytes.
	Subscribers []NodeID
}

// TopicInfo describes a topic of the current view (Group.Topics).
type TopicInfo struct {
	Name        string
	Mode        Mode
	Subscribers []NodeID
	// Subscribed says this member is one of the Subscribers.
	Subscribed bool
}

// Limits on topics.
const (
	// MaxTopics bounds a group's topics.
	MaxTopics = engine.MaxTopics
	// MaxTopicName bounds a topic's name, in bytes.
	MaxTopicName = engine.MaxTopicName
)

// Errors about topics.
var (
	// ErrUnknownTopic is returned by Publish and Subscribe for a topic the
	// group does not have (or a name no topic can have).
	ErrUnknownTopic = engine.ErrUnknownTopic
	// ErrNotSubscribed is returned by Subscribe, in a group with fixed
	// membership, for a topic this member does not subscribe to.
	ErrNotSubscribed = engine.ErrNotSubscribed
	// ErrFixedTopics is returned by Unsubscribe in a group with fixed
	// membership, whose subscriptions are for good.
	ErrFixedTopics = engine.ErrFixedTopics
)

// TopicOption changes how Subscribe creates a topic.
type TopicOption = engine.TopicOption

// WithTopicMode sets the mode of a topic that Subscribe creates, in a
// view-managed group (default Atomic; a durable group's topics are
// Atomic, and Subscribe refuses another mode with ErrInvalidConfig).
func WithTopicMode(m Mode) TopicOption { return engine.WithTopicMode(m) }

// Publish multicasts payload on topic to the topic's subscribers only,
// in the group's one order: every member delivers the messages of the
// group and of its topics interleaved in one sequence, and any two
// messages that two members both deliver come in the same relative order
// at both. The subscribers of a topic deliver its messages in the same
// order, with the same Delivery.Index; a member that does not subscribe
// receives none of its bytes.
//
// Publish waits as Send does: until the message is accepted (the window
// of undelivered messages is shared with Send), or with WaitStable until
// every subscriber holds it, or with WaitDelivered until this member
// delivered it (when it does not subscribe to the topic, until every
// subscriber holds it). The Receipt numbers the message among this
// member's on the topic.
//
// It returns ErrUnknownTopic for a topic the group does not have, and
// the errors Send returns.
func (g *Group) Publish(ctx context.Context, topic string, payload []byte, opts ...SendOption) (Receipt, error) {
	r, err := g.e.Publish(ctx, topic, payload, opts...)
	return Receipt(r), err
}

// Subscribe makes this member a subscriber of topic and hands the
// topic's messages to h instead of the group's handler (nil: to the
// group's handler); h runs on the group's goroutine as the Handler does,
// in order with every other delivery.
//
// In a view-managed group, Subscribe asks for the subscription in etcd —
// creating the topic, in the mode WithTopicMode gives (default Atomic),
// if the group lacks it — and returns once the view that makes this
// member a subscriber is installed. A subscription, and an Unsubscribe,
// takes effect at a view boundary, the point in the group's sequence
// every member agrees on: the topic's subscribers of a view are fixed
// for the view (View.Topics lists them), and h receives the topic's
// messages from the view's start on. The request stands: a member
// excluded and rejoining as a new incarnation subscribes again.
//
// In a group with fixed membership the subscriptions are those of
// Config.Topics, for good: Subscribe only attaches h, and returns
// ErrNotSubscribed for a topic this member does not subscribe to, and
// ErrUnknownTopic for one the group does not have.
func (g *Group) Subscribe(ctx context.Context, topic string, h Handler, opts ...TopicOption) error {
	var eh engine.Handler
	if h != nil {
		eh = func(d engine.Delivery) { h(Delivery(d)) }
	}
	return g.e.Subscribe(ctx, topic, eh, opts...)
}

// Unsubscribe ends this member's subscription to topic, in a
// view-managed group: it asks for it in etcd and returns once the view
// without it is installed. In a group with fixed membership it returns
// ErrFixedTopics.
func (g *Group) Unsubscribe(ctx context.Context, topic string) error {
	return g.e.Unsubscribe(ctx, topic)
}

// Topics returns the topics of the current view, by name.
func (g *Group) Topics() []TopicInfo {
	ts := g.e.Topics()
	out := make([]TopicInfo, len(ts))
	for i, t := range ts {
		out[i] = TopicInfo(t)
	}
	return out
}
