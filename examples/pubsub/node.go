package pubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/admit"
)

// Options tune the service (validated defaults for zero values). The
// package documentation's "Overload" section says how MaxRequests,
// MaxRequestBytes and MaxStreams bound what a member takes on.
type Options struct {
	// MaxMessageBytes bounds a published message (default
	// DefaultMaxMessageBytes): a larger one gets 413. It must fit in the
	// group's Config.MaxMessageBytes.
	MaxMessageBytes int
	// Retain is how many of each subscribed topic's last messages the
	// member keeps for event streams to start or resume in (default
	// DefaultRetain).
	Retain int
	// MaxRequests bounds the requests this member serves at once, from
	// their arrival to their answer: publishes, subscriptions,
	// unsubscriptions and GET /topics; not event streams (MaxStreams)
	// nor GET /status, which is always served (default
	// DefaultMaxRequests, or the group's Config.WindowMessages if that
	// is smaller: a publish waits in the window until it is stable). A
	// request beyond it is refused at once with 503 and a Retry-After
	// header, and the client tries again later; a publish takes its
	// place before its body is read.
	MaxRequests int
	// MaxRequestBytes bounds the bytes the publishes being served hold,
	// as admission counts them: a publish's body, or MaxMessageBytes if
	// the request does not declare its length. Beyond it a publish is
	// refused like a request beyond MaxRequests. Default: the group's
	// Config.WindowBytes (admitted messages wait in its window: admitting
	// more would only queue them), or MaxMessageBytes if that is more;
	// it may not be less.
	MaxRequestBytes int
	// MaxStreams bounds the event streams (GET /topics/{name}/events)
	// this member serves at once (default DefaultMaxStreams). A stream
	// lasts as long as its client stays, so it has a bound of its own,
	// apart from MaxRequests; a stream beyond it is refused with 503 and
	// a Retry-After header before anything else is done for it.
	MaxStreams int
	// RetryAfter is how long a client refused for capacity is asked to
	// wait before it tries again (default DefaultRetryAfter), in HTTP's
	// Retry-After header: whole seconds, rounded up.
	RetryAfter time.Duration
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// MeterProvider receives the service's metrics (the README's Metrics
	// section lists them); nil: the group's Config.MeterProvider, and
	// none if that is nil too.
	MeterProvider metric.MeterProvider
}

// Defaults of Options.
const (
	// DefaultMaxMessageBytes is Options.MaxMessageBytes' default, the
	// library's largest message.
	DefaultMaxMessageBytes = 1 << 20
	// DefaultRetain is Options.Retain's default.
	DefaultRetain = 10_000
	// DefaultMaxRequests is Options.MaxRequests' default (unless the
	// group's window holds fewer messages): as the shared log's and the
	// key-value store's, enough to keep a group busy, and few enough
	// that the requests a member wakes at once do not hold its group's
	// own goroutines off the CPU for long.
	DefaultMaxRequests = 256
	// DefaultMaxStreams is Options.MaxStreams' default, as the key-value
	// store's: each stream holds a goroutine, a connection and a batch of
	// events being written.
	DefaultMaxStreams = 128
	// DefaultRetryAfter is Options.RetryAfter's default: HTTP's
	// Retry-After counts whole seconds.
	DefaultRetryAfter = time.Second
)

// ErrInvalidOptions is returned by Open for Options it cannot serve
// with: a negative bound, or a MaxRequestBytes below MaxMessageBytes.
var ErrInvalidOptions = errors.New("pubsub: invalid options")

// withDefaults checks o and fills in the defaults, for a node of a group
// configured by cfg (its window and meter provider; the library's
// defaults for fields left zero).
func (o Options) withDefaults(cfg convoy.Config) (Options, error) {
	if o.MaxMessageBytes < 0 || o.Retain < 0 || o.MaxRequests < 0 || o.MaxRequestBytes < 0 || o.MaxStreams < 0 || o.RetryAfter < 0 {
		return o, fmt.Errorf("%w: MaxMessageBytes, Retain, MaxRequests, MaxRequestBytes, MaxStreams and RetryAfter must not be negative", ErrInvalidOptions)
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.Retain == 0 {
		o.Retain = DefaultRetain
	}
	o.MaxRequests, o.MaxRequestBytes = admit.Limits(cfg, o.MaxRequests, o.MaxRequestBytes, DefaultMaxRequests, o.MaxMessageBytes)
	if o.MaxRequestBytes < o.MaxMessageBytes {
		return o, fmt.Errorf("%w: MaxRequestBytes %d is below MaxMessageBytes %d, what the largest publish counts", ErrInvalidOptions, o.MaxRequestBytes, o.MaxMessageBytes)
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = cfg.MeterProvider
	}
	return o, nil
}

// Errors of the service, each answered with its HTTP status (see the
// package documentation).
var (
	// ErrUnavailable: this member cannot serve now (503).
	ErrUnavailable = errors.New("pubsub: unavailable")
	// ErrTrimmed: a cursor below the prefix of the topic this member
	// keeps (410).
	ErrTrimmed = errors.New("pubsub: below the kept prefix")
	// ErrNotSubscribed: an event stream of a topic this member does not
	// subscribe to (409).
	ErrNotSubscribed = errors.New("pubsub: this member does not subscribe to the topic")
	// errTooLarge: a message above Options.MaxMessageBytes (413).
	errTooLarge = errors.New("message too large")
	// errBadRequest: a malformed request (400).
	errBadRequest = errors.New("bad request")
)

// group is what a Node needs of its group: *convoy.Group, or a
// stand-in in tests.
type group interface {
	Publish(ctx context.Context, topic string, payload []byte, opts ...convoy.SendOption) (convoy.Receipt, error)
	Subscribe(ctx context.Context, topic string, h convoy.Handler, opts ...convoy.TopicOption) error
	Unsubscribe(ctx context.Context, topic string) error
	Topics() []convoy.TopicInfo
	View() (convoy.View, bool)
	Close() error
}

// Node is one member of the service: its group, the messages it keeps
// of its topics, and the HTTP API (Handler). Its methods are safe for
// concurrent use.
type Node struct {
	self convoy.NodeID
	opts Options
	log  *slog.Logger
	// admit bounds the requests and event streams served at once.
	admit *admission
	g     group
	cg    *convoy.Group // g, outside tests

	mu struct {
		sync.Mutex
		topics map[string]*topicLog
		// replayed holds the topics whose messages the durable log
		// replayed at Open.
		replayed map[string]bool
	}
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
}

// Open opens the group (cfg is the member's convoy.Config: Self, Etcd,
// Endpoint or ListenAddr/Addr, Topics to subscribe to as it joins, and
// Durable for a member that keeps its topics on disk) with this
// service's handler, and returns once the member takes part in a view.
// The service needs a view-managed group (cfg.Etcd), whose members
// subscribe themselves. A durable member restarted on its data directory
// keeps the messages its log replays, and subscribes again to their
// topics before Open returns.
func Open(ctx context.Context, cfg convoy.Config, opts Options) (*Node, error) {
	opts, err := opts.withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Etcd == nil {
		return nil, errors.New("pubsub: the service needs a view-managed group: set Config.Etcd")
	}
	limit := cfg.MaxMessageBytes
	if limit == 0 {
		limit = convoy.DefaultMaxMessageBytes
	}
	if opts.MaxMessageBytes > limit {
		return nil, fmt.Errorf("pubsub: MaxMessageBytes %d exceeds the group's %d", opts.MaxMessageBytes, limit)
	}
	n, err := newNode(cfg.Self, opts)
	if err != nil {
		return nil, err
	}
	g, err := convoy.Open(ctx, cfg, n.deliver)
	if err != nil {
		return nil, fmt.Errorf("pubsub: open the group: %w", err)
	}
	n.g, n.cg = g, g
	if err := n.resubscribe(ctx); err != nil {
		g.Close()
		return nil, err
	}
	return n, nil
}

// resubscribe subscribes this member again to the topics whose messages
// its durable log replayed as it opened: a member restarted on its data
// directory serves its topics from where it left off.
func (n *Node) resubscribe(ctx context.Context) error {
	n.mu.Lock()
	topics := slices.Sorted(maps.Keys(n.mu.replayed))
	n.mu.Unlock()
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() {
			if err := n.g.Subscribe(ctx, topic, nil); err != nil {
				errs[i] = fmt.Errorf("pubsub: subscribe again to %q: %w", topic, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newNode returns a node without its group; opts has its defaults.
func newNode(self convoy.NodeID, opts Options) (*Node, error) {
	a, err := newAdmission(opts)
	if err != nil {
		return nil, err
	}
	n := &Node{self: self, opts: opts, log: opts.Logger.With("member", self), admit: a, done: make(chan struct{})}
	n.mu.topics = make(map[string]*topicLog)
	n.mu.replayed = make(map[string]bool)
	return n, nil
}

// Group returns the member's group.
func (n *Node) Group() *convoy.Group { return n.cg }

// Close leaves the service: event streams end, and the group closes.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.done)
		n.closeErr = n.g.Close()
	})
	return n.closeErr
}

// deliver is the group's handler: it keeps the messages of the topics.
func (n *Node) deliver(d convoy.Delivery) {
	if d.Topic == "" {
		return // the service sends nothing to the whole group
	}
	if d.Replayed {
		n.mu.Lock()
		n.mu.replayed[d.Topic] = true
		n.mu.Unlock()
	}
	n.topic(d.Topic).add(Event{Index: d.Index, Epoch: d.Epoch, Sender: uint64(d.Sender), Seq: d.Seq, Data: d.Payload}, n.opts.Retain)
}

// topic returns the log kept of topic, made if need be.
func (n *Node) topic(name string) *topicLog {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.mu.topics[name]
	if t == nil {
		t = newTopicLog()
		n.mu.topics[name] = t
	}
	return t
}

// Publish publishes data on topic and returns once every subscriber
// holds it, with the message's number among this member's on the
// topic.
func (n *Node) Publish(ctx context.Context, topic string, data []byte) (uint64, error) {
	if len(data) > n.opts.MaxMessageBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", errTooLarge, len(data), n.opts.MaxMessageBytes)
	}
	r, err := n.g.Publish(ctx, topic, data, convoy.WaitStable())
	if err != nil {
		return 0, n.groupErr(err)
	}
	return r.Seq, nil
}

// Subscribe makes this member a subscriber of topic, creating the topic
// in mode if the group lacks it; it returns once the subscription is in
// effect.
func (n *Node) Subscribe(ctx context.Context, topic string, mode convoy.Mode) error {
	n.topic(topic) // its messages are kept from the first on
	if err := n.g.Subscribe(ctx, topic, nil, convoy.WithTopicMode(mode)); err != nil {
		return n.groupErr(err)
	}
	return nil
}

// Unsubscribe ends this member's subscription to topic.
func (n *Node) Unsubscribe(ctx context.Context, topic string) error {
	if err := n.g.Unsubscribe(ctx, topic); err != nil {
		return n.groupErr(err)
	}
	return nil
}

// groupErr classifies an error of the group for the API.
func (n *Node) groupErr(err error) error {
	switch {
	case errors.Is(err, convoy.ErrUnknownTopic), errors.Is(err, convoy.ErrInvalidConfig):
		return err
	case errors.Is(err, convoy.ErrTooLarge):
		return fmt.Errorf("%w: %w", errTooLarge, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// subscribed reports whether this member subscribes to topic in its
// current view, and whether the group has the topic.
func (n *Node) subscribed(topic string) (sub, exists bool) {
	for _, t := range n.g.Topics() {
		if t.Name == topic {
			return t.Subscribed, true
		}
	}
	return false, false
}
