package paxos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy"
)

// DefaultMaxValueBytes is Options.MaxValueBytes's default.
const DefaultMaxValueBytes = 1 << 20

// maybeSentWait bounds how long a request whose Send failed, but whose
// command may still be applied, waits for it.
const maybeSentWait = 2 * time.Second

// barrierTimeout bounds how long a linearizable read waits for its
// barrier, so that a member cut off from the group (whose barrier never
// comes back) answers 503 and the client tries another.
const barrierTimeout = 10 * time.Second

// Errors that make a request end with 503.
var (
	// errClosing: the node is closing.
	errClosing = errors.New("paxos: node closing")
	// errNotServing: this member takes part in no view (it was excluded
	// and is rejoining, or has not joined yet).
	errNotServing = errors.New("paxos: this member takes part in no view")
)

// Options tune the service. The zero value is valid.
type Options struct {
	// MaxValueBytes bounds a value (default DefaultMaxValueBytes): a
	// larger request body gets 413.
	MaxValueBytes int
	// Logger receives the service's logs; nil discards them. If the
	// group's Config.Logger is nil, the group logs here too.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxValueBytes < 0 {
		return o, fmt.Errorf("paxos: MaxValueBytes %d is negative", o.MaxValueBytes)
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// group is what a Node needs of its convoy.Group; tests put a fake here.
type group interface {
	Send(ctx context.Context, payload []byte, opts ...convoy.SendOption) (convoy.Receipt, error)
	Sync(ctx context.Context) (uint64, error)
	View() (convoy.View, bool)
	Close() error
}

// Node is one member of the replicated key-value store: the group member,
// its copy of the state, and the HTTP API that serves clients from it.
type Node struct {
	self  convoy.NodeID
	opts  Options
	log   *slog.Logger
	state *state
	wait  *pending
	// maybeSentWait is the constant of that name, shorter in tests.
	maybeSentWait time.Duration
	// group is the member's group (nil in tests); g is the same, or the
	// fake a test put in its place. Both are set once Open returns.
	group *convoy.Group
	g     group
	// ctx ends when the node closes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// streams are the upgraded connections being served (stream.go).
	streams struct {
		sync.Mutex
		m      map[*stream]struct{}
		closed bool
	}

	closeOnce sync.Once
	closeErr  error
	handler   http.Handler
}

// Open opens the group with this service's state machine and returns the
// member's node. cfg is the member's convoy.Config (Self, Etcd, Durable,
// Endpoint or ListenAddr/Addr, ...): Open sets cfg.State (which must be
// nil) and wraps cfg.OnView, calling the caller's OnView too, then calls
// convoy.Open. Set cfg.Durable for writes acknowledged only once on disk
// on every member; without it they are acknowledged once every member
// holds them in memory. With it, calling Group().Snapshot from time to
// time keeps the state in the log and trims the entries before it, which
// a restart then need not replay.
func Open(ctx context.Context, cfg convoy.Config, opts Options) (*Node, error) {
	userLogger := opts.Logger
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.State != nil {
		return nil, errors.New("paxos: cfg.State must be nil: the service provides the state machine")
	}
	limit := cfg.MaxMessageBytes
	if limit == 0 {
		limit = convoy.DefaultMaxMessageBytes
	}
	if need := maxCommandBytes(opts.MaxValueBytes); need > limit {
		return nil, fmt.Errorf("paxos: MaxValueBytes %d needs messages of %d bytes, the group allows %d", opts.MaxValueBytes, need, limit)
	}
	n := newNode(cfg.Self, opts)
	cfg.State = stateMachine{n}
	userOnView := cfg.OnView
	cfg.OnView = func(v convoy.View) {
		n.onView(v)
		if userOnView != nil {
			userOnView(v)
		}
	}
	if cfg.Logger == nil && userLogger != nil {
		cfg.Logger = userLogger
	}
	g, err := convoy.Open(ctx, cfg, n.deliver)
	if err != nil {
		n.cancel()
		return nil, fmt.Errorf("paxos: open the group: %w", err)
	}
	n.group, n.g = g, g
	return n, nil
}

// maxCommandBytes is the largest command with values of up to
// maxValue bytes: a cas carries two.
func maxCommandBytes(maxValue int) int { return 2*maxValue + MaxKeyBytes + commandOverhead }

// newNode returns a node without its group.
func newNode(self convoy.NodeID, opts Options) *Node {
	log := opts.Logger.With("member", self)
	n := &Node{self: self, opts: opts, log: log, state: newState(log), wait: newPending(), maybeSentWait: maybeSentWait}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.handler = n.routes()
	return n
}

// Group returns the member's group.
func (n *Node) Group() *convoy.Group { return n.group }

// Close closes the group. Requests in flight, and later ones, end with
// 503.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.wait.close(errClosing)
		n.cancel()
		n.closeStreams()
		if n.g != nil {
			n.closeErr = n.g.Close()
		}
		n.wg.Wait()
	})
	return n.closeErr
}

// deliver applies a delivery and answers the requests waiting for it.
// It runs on the group's delivery goroutine.
func (n *Node) deliver(d convoy.Delivery) {
	a, ok := n.state.apply(d.Index, d.Payload)
	if ok {
		n.wait.complete(a.cmd.id, a.res)
	}
}

// onView follows the member's views. Once it is excluded, the commands
// it sent and has not applied may be applied by the others or lost, and
// it applies nothing more until its state is replaced: the requests
// waiting for them end with 503, and clients retry (with the same
// request id) elsewhere.
func (n *Node) onView(v convoy.View) {
	if v.Excluded {
		n.log.Warn("excluded from the group; failing waiting requests", "epoch", v.Epoch)
		n.wait.failAll(fmt.Errorf("%w: excluded by view %d", errNotServing, v.Epoch))
		return
	}
	n.log.Info("view", "epoch", v.Epoch, "members", len(v.Members), "applied", n.state.appliedIndex())
}

// restored answers, after the state was replaced by transfer, the
// requests whose writes the new state holds results for.
func (n *Node) restored() {
	n.log.Info("state restored", "applied", n.state.appliedIndex())
	for _, id := range n.wait.ids() {
		if r, ok := n.state.resultOf(id); ok {
			n.wait.complete(id, r)
		}
	}
}

// submit sends c through the group and waits until it is applied, ctx
// ends, or this member cannot tell any more.
func (n *Node) submit(ctx context.Context, c command) (result, error) {
	ch, err := n.wait.add(c.id)
	if err != nil {
		return result{}, err
	}
	_, sendErr := n.g.Send(ctx, encodeCommand(c))
	if sendErr != nil && !maybeSent(sendErr) {
		n.wait.remove(c.id, ch)
		return result{}, sendErr
	}
	if sendErr != nil {
		// The command may still be applied: it is answered if so while
		// the request lasts, up to a bound (a retry with the same
		// request id learns the result anyway).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.maybeSentWait)
		defer cancel()
	}
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
	}
	n.wait.remove(c.id, ch)
	select {
	case o := <-ch: // applied meanwhile
		return o.res, o.err
	default:
	}
	if sendErr != nil {
		return result{}, sendErr
	}
	return result{}, ctx.Err()
}

// maybeSent reports whether a command whose Send failed with err may
// still be delivered.
func maybeSent(err error) bool {
	return errors.Is(err, convoy.ErrExcluded) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// barrier waits for a linearizable read barrier (convoy.Group.Sync) and
// returns the index the state is applied to: every write acknowledged
// anywhere before the call.
func (n *Node) barrier(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, barrierTimeout)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()
	index, err := n.g.Sync(ctx)
	switch {
	case err == nil:
	case n.ctx.Err() != nil:
		err = errClosing
	case statusOf(err) == http.StatusInternalServerError:
		// etcd out of reach, say: another member may serve the read.
		err = fmt.Errorf("%w: %w", errNotServing, err)
	}
	return index, err
}

// Status is what GET /status reports.
type Status struct {
	// ID is this member's id.
	ID uint64 `json:"id"`
	// Epoch and Members describe the last view this member installed.
	Epoch   uint64   `json:"epoch"`
	Members []uint64 `json:"members"`
	// Serving says whether this member takes part in that view.
	Serving bool `json:"serving"`
	// Applied is the index of the last delivery applied.
	Applied uint64 `json:"applied"`
	// Group is the library's account of this member (convoy.Group.Status).
	Group *convoy.Status `json:"group,omitempty"`
}

// Status returns the member's status.
func (n *Node) Status() Status {
	s := Status{ID: uint64(n.self), Members: []uint64{}, Applied: n.state.appliedIndex()}
	if n.g != nil {
		v, ok := n.g.View()
		s.Epoch, s.Serving = v.Epoch, ok
		for _, m := range v.Members {
			s.Members = append(s.Members, uint64(m.ID))
		}
		if sg, ok := n.g.(interface{ Status() convoy.Status }); ok {
			gs := sg.Status()
			s.Group = &gs
		}
	}
	return s
}

// stateMachine gives the group the node's state for transfer and
// snapshots. It is a convoy.Checkpointer: the group's snapshots never
// hold deliveries back.
type stateMachine struct{ n *Node }

// Snapshot writes part `part` of `of` of the state.
func (m stateMachine) Snapshot(w io.Writer, part, of int) error {
	return m.n.state.snapshot(w, part, of)
}

// Checkpoint fixes the state as it is now; the group writes snapshots
// from it while deliveries go on.
func (m stateMachine) Checkpoint() (convoy.StateSnapshot, error) {
	return m.n.state.checkpoint(), nil
}

// Restore replaces the state with the one the parts describe.
func (m stateMachine) Restore(parts []io.Reader) error {
	if err := m.n.state.restore(parts); err != nil {
		return err
	}
	m.n.restored()
	return nil
}
