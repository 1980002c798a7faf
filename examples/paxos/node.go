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

	"go.opentelemetry.io/otel/metric"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/admit"
)

// Defaults of Options.
const (
	// DefaultMaxValueBytes is Options.MaxValueBytes's default.
	DefaultMaxValueBytes = 1 << 20
	// DefaultMaxRequests is Options.MaxRequests's default (unless the
	// group's window holds fewer messages). It is enough to keep a group
	// busy (at 20,000 writes a second and 10 ms each, 200 in flight), and
	// few enough that the requests a member wakes at once (the answers
	// of a batch of deliveries) do not hold its group's own goroutines
	// (the failure detector's heartbeats, the transport) off the CPU for
	// long: with 512 on two busy cores, a connection's writer was seen
	// waiting 300 ms for its turn.
	DefaultMaxRequests = 256
	// DefaultMaxStreams is Options.MaxStreams's default: a Go client
	// opens one stream per member it uses and carries all its callers'
	// requests over it, so a member serves one stream per client process.
	DefaultMaxStreams = 128
	// DefaultRetryAfter is Options.RetryAfter's default: HTTP's
	// Retry-After counts whole seconds.
	DefaultRetryAfter = time.Second
)

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

// errExpired ends, with 409, a write that expired before it was applied
// (see RequestLifetime): it was not applied, and an earlier attempt of
// the same request may or may not have been.
var errExpired = errors.New("paxos: request expired before it was applied")

// errIssuedAhead ends, with 400, a write whose issued time is more than
// MaxIssuedAhead ahead of this member's clock.
var errIssuedAhead = errors.New("paxos: issued time ahead of the member's clock")

// MaxIssuedAhead is how far ahead of a member's clock a write's issued
// time (IssuedHeader) may be: a write issued further ahead is refused
// with 400, so that no client can move the state machine's clock (and
// expire other writes) much beyond the members' clocks.
const MaxIssuedAhead = time.Second

// Options tune the service. The zero value is valid. The package
// documentation's "Overload and memory" section says how MaxRequests,
// MaxRequestBytes, MaxStreams and MaxValueBytes bound a member's memory.
type Options struct {
	// MaxValueBytes bounds a value (default DefaultMaxValueBytes): a
	// larger request body gets 413.
	MaxValueBytes int
	// MaxRequests bounds the requests this member serves at once: reads
	// and writes, over HTTP and over streams, from their arrival to their
	// answer (default DefaultMaxRequests, or the group's
	// Config.WindowMessages if that is smaller). An HTTP request beyond it
	// is refused at once with 503 and a Retry-After header, and the
	// client tries again later; a stream's request waits up to
	// RetryAfter for a place and, if none frees, gets 503 with the
	// response's RetryAfter. A request takes its place before its body
	// is read.
	MaxRequests int
	// MaxRequestBytes bounds the bytes the requests being served hold,
	// as admission counts them: a put's body, and the command made of
	// it, twice its length (the limit, if the request does not declare
	// its length); a cas's JSON body four times (its decoded values and
	// the command); a stream's write frame twice, and its read frame
	// once. Beyond it a request is refused like one beyond MaxRequests.
	// Default: the group's Config.WindowBytes (admitted commands wait in
	// its window: admitting more would only queue them), or the largest
	// request's count if that is more; it may not be less.
	MaxRequestBytes int
	// MaxStreams bounds the streams served at once (default
	// DefaultMaxStreams): an upgrade beyond it is refused with 503 and a
	// Retry-After.
	MaxStreams int
	// RetryAfter is how long a client refused for capacity is asked to
	// wait before it tries again, and how long a stream's request waits
	// for a place before it is refused (default DefaultRetryAfter): in
	// HTTP's Retry-After header in whole seconds, rounded up; in a
	// stream's response in milliseconds.
	RetryAfter time.Duration
	// IdleRelease, if positive, makes the member return the memory its
	// garbage collector holds to the system (two collections, so that
	// what the sync.Pools hold goes too, then debug.FreeOSMemory) once
	// it has served requests and then none for that long, so that its
	// RSS comes back near what it holds at rest after a load instead of
	// staying near its peak (see "Overload and memory"). It acts on the
	// whole process: set it where the member is the process's main work,
	// as "convoy node" does. Zero leaves the memory to the Go runtime.
	IdleRelease time.Duration
	// Logger receives the service's logs; nil discards them. If the
	// group's Config.Logger is nil, the group logs here too.
	Logger *slog.Logger
	// MeterProvider receives the service's metrics (the README's Metrics
	// section lists them); nil: the group's Config.MeterProvider, and
	// none if that is nil too.
	MeterProvider metric.MeterProvider

	// release stands in for freeOSMemory when set (tests count calls).
	release func()
}

// withDefaults checks o and fills in the defaults, for a node of a group
// configured by cfg (its window and meter provider; the library's
// defaults for fields left zero).
func (o Options) withDefaults(cfg convoy.Config) (Options, error) {
	switch {
	case o.MaxValueBytes < 0:
		return o, fmt.Errorf("paxos: MaxValueBytes %d is negative", o.MaxValueBytes)
	case o.MaxRequests < 0, o.MaxRequestBytes < 0, o.MaxStreams < 0, o.RetryAfter < 0, o.IdleRelease < 0:
		return o, fmt.Errorf("paxos: MaxRequests, MaxRequestBytes, MaxStreams, RetryAfter and IdleRelease must not be negative")
	}
	if o.MaxValueBytes == 0 {
		o.MaxValueBytes = DefaultMaxValueBytes
	}
	largest := o.largestCharge()
	o.MaxRequests, o.MaxRequestBytes = admit.Limits(cfg, o.MaxRequests, o.MaxRequestBytes, DefaultMaxRequests, largest)
	if o.MaxRequestBytes < largest {
		return o, fmt.Errorf("paxos: MaxRequestBytes %d is below %d, what the largest request (values of MaxValueBytes %d) counts", o.MaxRequestBytes, largest, o.MaxValueBytes)
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

// casBodyLimit bounds a cas's JSON body: JSON may escape a byte as six
// ("\u0000"), so the body may be larger than its values, within reason.
func (o Options) casBodyLimit() int { return 4*o.MaxValueBytes + 4096 }

// streamFrameLimit bounds a stream's request frame: the largest command
// and room for the frame's own fields.
func (o Options) streamFrameLimit() int { return maxCommandBytes(o.MaxValueBytes) + 64 }

// largestCharge is what admission counts for the largest request.
func (o Options) largestCharge() int {
	return max(2*o.MaxValueBytes, 4*o.casBodyLimit(), 2*o.streamFrameLimit())
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
	self convoy.NodeID
	opts Options
	log  *slog.Logger
	// admit bounds the requests served at once, and counts the streams
	// (see newAdmission).
	admit *admit.Metered
	state *state
	wait  *pending
	// effects is deliver's buffer; deliver runs on the group's one
	// delivery goroutine.
	effects []effect
	// maybeSentWait is the constant of that name, shorter in tests.
	maybeSentWait time.Duration
	// now is the member's clock (time.Now; another in tests): it stamps
	// the writes that carry no issued time, and checks those that do.
	now func() time.Time
	// group is the member's group (nil in tests); g is the same, or the
	// fake a test put in its place. Both are set once Open returns.
	group *convoy.Group
	g     group
	// ctx ends when the node closes.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// streamSlots holds a token per stream being served, at most
	// MaxStreams.
	streamSlots chan struct{}
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
	opts, err := opts.withDefaults(cfg)
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
	n, err := newNode(cfg.Self, opts)
	if err != nil {
		return nil, err
	}
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

// newNode returns a node without its group; opts has its defaults.
func newNode(self convoy.NodeID, opts Options) (*Node, error) {
	a, err := newAdmission(opts)
	if err != nil {
		return nil, err
	}
	log := opts.Logger.With("member", self)
	n := &Node{
		self: self, opts: opts, log: log, admit: a,
		state: newState(log), wait: newPending(), maybeSentWait: maybeSentWait, now: time.Now,
		streamSlots: make(chan struct{}, opts.MaxStreams),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.handler = n.routes()
	if opts.IdleRelease > 0 {
		n.wg.Add(1)
		release := opts.release
		if release == nil {
			release = freeOSMemory
		}
		go n.releaseWhenIdle(release)
	}
	return n, nil
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
	n.effects = n.state.apply(n.effects[:0], d.Index, d.Payload)
	for _, a := range n.effects {
		n.wait.complete(a.cmd.id, a.cmd.issued, a.res)
	}
	clear(n.effects)
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
			n.wait.complete(id, 0, r)
		}
	}
}

// submit sends c through the group and waits until it is applied, ctx
// ends, or this member cannot tell any more. A command that expired
// before it was applied ends with errExpired.
func (n *Node) submit(ctx context.Context, c command) (result, error) {
	o := n.submitBatch(ctx, []command{c})[0]
	return o.res, o.err
}

// submitBatch sends the writes cs in one message (a batch applied at one
// delivery, or the command alone if it is one), and returns their
// outcomes in order, as submit returns each.
func (n *Node) submitBatch(ctx context.Context, cs []command) []outcome {
	out := make([]outcome, len(cs))
	n.submitAll(ctx, cs, out)
	for i := range out {
		if out[i].err == nil && out[i].res.expired {
			out[i] = outcome{err: errExpired}
		}
	}
	return out
}

// submitAll sends cs, one command or a batch, and waits for each of them
// to be applied, putting their outcomes in out.
func (n *Node) submitAll(ctx context.Context, cs []command, out []outcome) {
	chs := make([]chan outcome, len(cs))
	var send []command
	for i, c := range cs {
		ch, err := n.wait.add(c.id, c.issued)
		if err != nil {
			out[i].err = err
			continue
		}
		chs[i] = ch
		send = append(send, c)
	}
	var payload []byte
	switch len(send) {
	case 0:
		return
	case 1:
		payload = encodeCommand(send[0])
	default:
		payload = encodeBatch(send)
	}
	_, sendErr := n.g.Send(ctx, payload)
	if sendErr != nil && !maybeSent(sendErr) {
		for i, ch := range chs {
			if ch != nil {
				n.wait.remove(cs[i].id, ch)
				out[i].err = sendErr
			}
		}
		return
	}
	if sendErr != nil {
		// The commands may still be applied: each is answered if so
		// while the request lasts, up to a bound (a retry with the same
		// request id learns the result anyway).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.maybeSentWait)
		defer cancel()
	}
	for i, ch := range chs {
		if ch == nil {
			continue
		}
		select {
		case out[i] = <-ch:
			continue
		case <-ctx.Done():
		}
		n.wait.remove(cs[i].id, ch)
		select {
		case out[i] = <-ch: // applied meanwhile
			continue
		default:
		}
		out[i].err = ctx.Err()
		if sendErr != nil {
			out[i].err = sendErr
		}
	}
}

// issuedTime returns the issued time of a write that carries issued (0:
// none): issued itself, or this member's clock for a write without one,
// which then counts from the time the member read it. It returns
// errIssuedAhead for a time more than MaxIssuedAhead ahead of the
// member's clock, and errExpired for one the member's clock says has
// expired already (see RequestLifetime), which is not worth sending.
func (n *Node) issuedTime(issued int64) (int64, error) {
	now := n.now().UnixNano()
	switch {
	case issued == 0:
		return now, nil
	case issued-now > int64(MaxIssuedAhead):
		return 0, fmt.Errorf("%w: by %v, at most %v", errIssuedAhead, time.Duration(issued-now), MaxIssuedAhead)
	case now-issued > int64(RequestLifetime):
		return 0, errExpired
	}
	return issued, nil
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
