package sharedlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/admit"
)

// Options tune the service (validated defaults for zero values). The
// package documentation's "Overload" section says how MaxRequests and
// MaxRequestBytes bound what a member takes on.
type Options struct {
	// MaxValueBytes bounds an entry (default DefaultMaxValueBytes): a
	// larger append gets 413. With the stream names and request id, a
	// command must fit in the group's Config.MaxMessageBytes.
	MaxValueBytes int
	// MaxRequests bounds the requests this member serves at once, from
	// their arrival to their answer: appends, trims and reads, all but
	// GET /status (default DefaultMaxRequests, or the group's
	// Config.WindowMessages if that is smaller). A request beyond it is
	// refused at once with 503 and a Retry-After header, and the client
	// tries again later; an append takes its place before its body is
	// read.
	MaxRequests int
	// MaxRequestBytes bounds the bytes the appends being served hold, as
	// admission counts them: twice an append's body (the body, then the
	// command made of it), or twice MaxValueBytes if the request does
	// not declare its length. Beyond it an append is refused like a
	// request beyond MaxRequests. Default: the group's Config.WindowBytes
	// (admitted commands wait in its window: admitting more would only
	// queue them), or twice MaxValueBytes if that is more; it may not be
	// less.
	MaxRequestBytes int
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
	// DefaultMaxValueBytes is Options.MaxValueBytes' default.
	DefaultMaxValueBytes = 1 << 20
	// DefaultMaxRequests is Options.MaxRequests' default (unless the
	// group's window holds fewer messages): as the key-value store's
	// (examples/paxos), enough to keep a group busy, and few enough that
	// the requests a member wakes at once do not hold its group's own
	// goroutines off the CPU for long.
	DefaultMaxRequests = 256
	// DefaultRetryAfter is Options.RetryAfter's default: HTTP's
	// Retry-After counts whole seconds.
	DefaultRetryAfter = time.Second
)

// withDefaults checks o and fills in the defaults, for a node of a group
// configured by cfg (its window and meter provider; the library's
// defaults for fields left zero).
func (o Options) withDefaults(cfg convoy.Config) (Options, error) {
	switch {
	case o.MaxValueBytes < 0:
		return o, fmt.Errorf("sharedlog: MaxValueBytes %d is negative", o.MaxValueBytes)
	case o.MaxRequests < 0, o.MaxRequestBytes < 0, o.RetryAfter < 0:
		return o, errors.New("sharedlog: MaxRequests, MaxRequestBytes and RetryAfter must not be negative")
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	largest := appendCharge(o.MaxValueBytes)
	o.MaxRequests, o.MaxRequestBytes = admit.Limits(cfg, o.MaxRequests, o.MaxRequestBytes, DefaultMaxRequests, largest)
	if o.MaxRequestBytes < largest {
		return o, fmt.Errorf("sharedlog: MaxRequestBytes %d is below %d, what the largest append (of MaxValueBytes %d) counts", o.MaxRequestBytes, largest, o.MaxValueBytes)
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

// ErrUnavailable means this member cannot serve the request now (HTTP
// 503): it takes part in no view (it is joining, rejoining after an
// exclusion, or on the minority side of a partition), it is closing, the
// group failed, or the request ended before its command was applied. The
// request may or may not have taken effect: retry it, with the same
// request id, on another member.
var ErrUnavailable = errors.New("sharedlog: unavailable")

// errTooLarge is returned for an entry above Options.MaxValueBytes (HTTP
// 413).
var errTooLarge = errors.New("entry too large")

// group is what a Node needs of its group: *convoy.Group, or a stand-in
// in tests.
type group interface {
	Send(ctx context.Context, payload []byte, opts ...convoy.SendOption) (convoy.Receipt, error)
	Sync(ctx context.Context) (uint64, error)
	View() (convoy.View, bool)
	Close() error
}

// Node is one member of the shared log: its group, its replica of the
// log and the HTTP API (Handler). Its methods are safe for concurrent
// use.
type Node struct {
	self convoy.NodeID
	opts Options
	log  *slog.Logger
	// admit bounds the requests served at once (see newAdmission).
	admit   *admit.Metered
	g       group
	cg      *convoy.Group // g, outside tests
	st      *state
	waiters waiters

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
}

// Open opens the group (cfg is the member's convoy.Config: Self, Etcd,
// Durable, Endpoint or ListenAddr/Addr ...) with this service's state
// machine: it sets cfg.State and wraps cfg.OnView (calling the caller's
// OnView too), then convoy.Open. The log needs durable delivery:
// cfg.Durable must be set. Open returns once the member takes part in a
// view, with the log's state if it joined.
func Open(ctx context.Context, cfg convoy.Config, opts Options) (*Node, error) {
	opts, err := opts.withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Durable == nil {
		return nil, errors.New("sharedlog: the log needs durable delivery: set Config.Durable")
	}
	limit := cfg.MaxMessageBytes
	if limit == 0 {
		limit = convoy.DefaultMaxMessageBytes
	}
	if opts.MaxValueBytes > limit-maxCommandOverhead {
		return nil, fmt.Errorf("sharedlog: MaxValueBytes %d does not fit in a message of %d bytes with its %d bytes of header", opts.MaxValueBytes, limit, maxCommandOverhead)
	}
	n, err := newNode(cfg.Self, opts)
	if err != nil {
		return nil, err
	}
	cfg.State = stateMachine{n}
	onView := cfg.OnView
	cfg.OnView = func(v convoy.View) {
		n.onView(v)
		if onView != nil {
			onView(v)
		}
	}
	g, err := convoy.Open(ctx, cfg, n.deliver)
	if err != nil {
		return nil, fmt.Errorf("sharedlog: open the group: %w", err)
	}
	n.g, n.cg = g, g
	return n, nil
}

// newNode returns a node without its group; opts has its defaults.
func newNode(self convoy.NodeID, opts Options) (*Node, error) {
	a, err := newAdmission(opts)
	if err != nil {
		return nil, err
	}
	log := opts.Logger.With("member", self)
	return &Node{
		self: self, opts: opts, log: log, admit: a,
		st: newState(log), done: make(chan struct{}),
	}, nil
}

// Group returns the node's group.
func (n *Node) Group() *convoy.Group { return n.cg }

// Close closes the group; requests in flight end with 503, and so do
// later ones.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		close(n.done)
		n.waiters.failAll(fmt.Errorf("%w: closing", ErrUnavailable))
		if n.g != nil {
			n.closeErr = n.g.Close()
		}
	})
	return n.closeErr
}

// closed reports whether Close was called.
func (n *Node) closed() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// deliver is the group's handler: it applies a delivery and answers the
// request waiting for it here, if any.
func (n *Node) deliver(d convoy.Delivery) {
	if key, r, ok := n.st.apply(d.Index, d.Payload); ok {
		n.waiters.complete(key, r)
	}
}

// onView ends the requests waiting here when this member is excluded:
// their commands may be lost (beyond the view's cut) or applied by the
// others; the client retries them elsewhere with the same request id.
func (n *Node) onView(v convoy.View) {
	if v.Excluded {
		n.log.Warn("excluded from the group; rejoining", "epoch", v.Epoch)
		n.waiters.failAll(fmt.Errorf("%w: excluded from view %d", ErrUnavailable, v.Epoch))
	}
}

// stateMachine is the node's convoy.StateMachine: the state's, plus
// settling the waiters once a transfer replaced it.
type stateMachine struct{ n *Node }

func (sm stateMachine) Snapshot(w io.Writer, part, of int) error {
	return sm.n.st.Snapshot(w, part, of)
}

// Checkpoint fixes the state as it is now (convoy.Checkpointer); the
// group writes snapshots from it while deliveries go on.
func (sm stateMachine) Checkpoint() (convoy.StateSnapshot, error) {
	return sm.n.st.Checkpoint()
}

func (sm stateMachine) Restore(parts []io.Reader) error {
	n := sm.n
	if err := n.st.Restore(parts); err != nil {
		n.log.Error("restoring the log's state", "err", err)
		return err
	}
	p := n.st.progress()
	n.log.Info("restored the log's state", "applied", p.applied, "trim", p.trim, "tail", p.tail)
	n.waiters.restored(n.st.lookup, fmt.Errorf("%w: rejoined the group; the request was not applied", ErrUnavailable))
	return nil
}

// propose sends c through the group and waits until this member applied
// it, returning its result (for a retried request, the original one).
func (n *Node) propose(ctx context.Context, c *command) (result, error) {
	w := n.waiters.add(c.key())
	defer n.waiters.remove(w)
	if _, err := n.g.Send(ctx, c.encode()); err != nil {
		if notSent(err) {
			if errors.Is(err, convoy.ErrTooLarge) {
				return result{}, fmt.Errorf("%w: %w", errTooLarge, err)
			}
			return result{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// The command may still be delivered: wait for it while the
		// request lives.
		n.waiters.markUnsure(w)
	}
	select {
	case o := <-w.done:
		return o.r, o.err
	case <-ctx.Done():
		return result{}, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	case <-n.done:
		return result{}, fmt.Errorf("%w: closing", ErrUnavailable)
	}
}

// notSent reports whether an error of Send means the message was not
// sent. The context's errors and ErrExcluded do not: the message may be
// delivered nonetheless.
func notSent(err error) bool {
	for _, e := range []error{convoy.ErrNotMember, convoy.ErrClosed, convoy.ErrLeft, convoy.ErrFailed, convoy.ErrTooLarge, convoy.ErrBackpressure} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// barrier waits for the group's read barrier (convoy.Group.Sync): once
// it returns, everything applied anywhere before the call is applied
// here. It returns the tail then.
func (n *Node) barrier(ctx context.Context) (uint64, error) {
	if _, err := n.g.Sync(ctx); err != nil {
		// Not a member now, closed, etcd out of reach, or the request's
		// time is up: another member, or a later try, may serve it.
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return n.st.tail(), nil
}

// appendEntry appends data to the log and the given streams and returns
// its position. Requests with the same id land once.
func (n *Node) appendEntry(ctx context.Context, id string, data []byte, streams []string) (uint64, error) {
	r, err := n.propose(ctx, &command{kind: kindAppend, id: id, streams: streams, data: data})
	return r.value, err
}

// trim drops the entries before position before (at most up to the
// tail) and returns the trim point.
func (n *Node) trim(ctx context.Context, id string, before uint64) (uint64, error) {
	r, err := n.propose(ctx, &command{kind: kindTrim, id: id, before: before})
	return r.value, err
}

// read returns the entry at pos: a written entry from this member's
// replica (entries never change), an unwritten one only after a barrier
// (so that "unwritten" is never stale).
func (n *Node) read(ctx context.Context, pos uint64) ([]byte, error) {
	data, err := n.st.read(pos)
	if !errors.Is(err, ErrUnwritten) {
		return data, err
	}
	if _, err := n.barrier(ctx); err != nil {
		return nil, err
	}
	return n.st.read(pos)
}

// readRange returns the entries in [from, to), bounded (MaxRangeEntries,
// MaxRangeBytes); a range reaching this member's tail waits for a
// barrier first.
func (n *Node) readRange(ctx context.Context, from, to uint64) ([]Entry, error) {
	if to > n.st.tail() {
		if _, err := n.barrier(ctx); err != nil {
			return nil, err
		}
	}
	return n.st.readRange(from, to), nil
}

// readStream returns the entries of a stream from position from,
// bounded, after a barrier.
func (n *Node) readStream(ctx context.Context, name string, from uint64) ([]Entry, error) {
	if _, err := n.barrier(ctx); err != nil {
		return nil, err
	}
	return n.st.readStream(name, from), nil
}
