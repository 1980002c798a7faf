package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/convoy-gcs/convoy/membership"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// Delivery is convoy.Delivery, one message delivered in the group's
// agreed order (see its documentation; the two convert into each other).
type Delivery struct {
	Epoch, Index uint64
	Topic        string
	Sender       NodeID
	Seq          uint64
	Timestamp    uint64
	Payload      []byte
	Replayed     bool
}

// Handler is convoy.Handler: it receives deliveries, one at a time, in
// order, on the group's loop.
type Handler func(Delivery)

// Group is one member's handle on a group. Its methods are safe for
// concurrent use.
type Group struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	tr  trace.Tracer
	// msgs follows sampled messages (the loop's only).
	msgs *msgTracer
	// viewReads shares the etcd reads of Syncs (sync.go).
	viewReads viewReads
	// install orders the durable log's writes of a state installed off
	// the loop (runner.installState) with the loop's own.
	install struct {
		sync.Mutex
		// superseded is the view whose state is being installed and
		// must not be written to the log any more (one at a time).
		superseded *view
	}
	h Handler
	// handlers are the handlers attached to topics (Subscribe).
	handlers topicHandlers
	ep       rdma.Endpoint
	ownEP    bool
	// mem is the membership runtime of a view-managed group (Config.Etcd
	// set); nil with fixed membership.
	mem *member
	// disk is the durable log (Config.Durable); synced gets a value when
	// it has synced more.
	disk   durableLog
	synced chan struct{}

	events chan event
	stop   chan struct{}
	// ctx ends when the group closes, or fails in a view-managed group
	// (member.withdraw); the loop's blocking calls use it.
	ctx    context.Context
	cancel context.CancelFunc
	// sendTurn is held (a value sent) by the one Send queueing a message.
	sendTurn chan struct{}
	// space gets a value when the window shrinks or the group ends.
	space chan struct{}
	// frames recycles the buffers of small records this member multicasts
	// (see smallFrameBytes).
	frames sync.Pool
	loopWG sync.WaitGroup
	// host, set only by the package's deterministic simulation, runs this
	// member without goroutines (see host); nil in production.
	host host
	// snapTurn is held (a value sent) by Snapshot from start to end: one
	// snapshot at a time, so that none commits over a later one.
	snapTurn chan struct{}

	// delivered is the index of the last message handed to the
	// application (Status).
	delivered atomic.Uint64

	mu struct {
		sync.Mutex
		closed bool
		err    error
		// epoch is the view this member takes part in (0: none); out says
		// why it takes part in none, when it does not.
		epoch uint64
		out   error
		// nextSeq is the number the next accepted Send gets: a member's
		// messages are numbered from 1 across views, per incarnation.
		nextSeq uint64
		// The window: own messages accepted and not yet delivered locally
		// (inflight), and not yet handed to every member by this member's
		// data group (sending). Send waits while either is full, so neither
		// the ordering buffers nor the multicast queue grow without bound.
		inflight, inflightBytes int
		sending, sendingBytes   int
		// queued counts messages accepted and not yet taken by the loop.
		queued, queuedBytes int
		waiters             map[msgID][]waiter
		// pubSeq is, per topic, the number of the last message published
		// on it that Publish accepted (numbered as nextSeq, per topic).
		pubSeq map[string]uint64
		// topics is the current view's topic table (Publish's check);
		// topicsSet is closed when it is replaced; wanted holds the topic
		// requests of a member of a view-managed group, by topic.
		topics    map[string]*membership.Topic
		topicsSet chan struct{}
		wanted    map[string]membership.TopicRequest
		delivered uint64 // highest own seq delivered locally
		stable    uint64 // highest own seq held by every member
		// durable is the highest index on every member's disk, in durable
		// delivery; durWaiters wait in WaitDurable.
		durable    uint64
		durWaiters []durWaiter
		// view is the last view handed to the application.
		view View
		// loop is what the loop last published of its state (Status).
		loop loopStatus
	}
}

type eventKind uint8

const (
	evSend eventKind = iota
	evRecord
	evFail
	evSignal
	evState
	evRestored
	evLinkDown
	evPersisted
	evSnapshot
	evSuffix
	evSync
	evInstalled
)

// event is something for the loop. v names the view it belongs to; the
// loop ignores events of views it has closed, except evInstalled, which
// ends an installation of state whatever became of its view.
type event struct {
	kind    eventKind
	v       *view
	from    int // evRecord, evSignal: the sender's rank
	rec     ordering.Record
	payload []byte
	topic   string // evSend: the topic published on ("": to the group)
	imm     uint64
	err     error
	state   *membership.State
	parts   [][]byte
	// reply answers evSnapshot; release is closed once Snapshot has read
	// the state, or gave up.
	reply   chan<- snapReply
	release <-chan struct{}
	// syncReply answers evSync; syncGone is closed if the caller stops
	// waiting.
	syncReply chan<- syncResult
	syncGone  <-chan struct{}
}

// Open joins this member to the group described by cfg.
//
// With fixed membership (Config.Members), every member must call Open with
// the same Members, Mode, BeaconInterval and FanOut; each waits for the
// others' connections as it needs them, and a failure ends the group.
//
// In a view-managed group (Config.Etcd set), Open registers this member in
// etcd and returns once it takes part in a view: the first view when it
// founds the group, otherwise the view that admits it, with its state
// transferred (Config.State).
func Open(ctx context.Context, cfg Config, h Handler) (*Group, error) {
	g, err := newGroup(ctx, cfg, h)
	if err != nil {
		return nil, err
	}
	if g.dynamic() {
		return g.openDynamic(ctx)
	}
	return g.openFixed(ctx)
}

// openFixed is Open for a group with fixed membership.
func (g *Group) openFixed(ctx context.Context) (_ *Group, err error) {
	// Until the loop runs, failures release what is set up so far.
	defer func() {
		if err != nil {
			g.release()
		}
	}()
	c := g.cfg
	if g.ep = c.Endpoint; g.ep == nil {
		if g.ep, err = g.listen(staticResolver(c.Members)); err != nil {
			return nil, err
		}
		g.ownEP = true
	}
	v, err := g.fixedView(ctx)
	if err != nil {
		return nil, err
	}
	g.loopWG.Add(1)
	go g.loop(&runner{g: g, v: v})
	return g, nil
}

// fixedView opens the one view of a group with fixed membership.
func (g *Group) fixedView(ctx context.Context) (*view, error) {
	c := g.cfg
	rec := membership.View{Epoch: c.Epoch, Sent: make([]uint64, len(c.Members)), Topics: topicRecords(c.Topics)}
	self := 0
	for i, m := range c.Members {
		rec.Members = append(rec.Members, membership.Member{ID: uint64(m.ID), Addr: m.Addr})
		if m.ID == c.Self {
			self = i
		}
	}
	v, err := g.openView(ctx, rec, self, c.Clock())
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.mu.epoch = rec.Epoch
	g.mu.view = publicView(&rec, nil)
	g.mu.Unlock()
	g.setTopics(&rec)
	return v, nil
}

// newGroup makes a Group for cfg, with its durable log open, before it
// reaches anyone.
func newGroup(ctx context.Context, cfg Config, h Handler) (*Group, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{
		cfg:      c,
		log:      c.Logger.With("member", c.Self),
		h:        h,
		host:     c.test.host,
		sendTurn: make(chan struct{}, 1),
		snapTurn: make(chan struct{}, 1),
		space:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	if g.host == nil {
		g.events = make(chan event, 4096)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.mu.nextSeq = 1
	g.mu.waiters = make(map[msgID][]waiter)
	g.mu.pubSeq = make(map[string]uint64)
	g.mu.topicsSet = make(chan struct{})
	g.wantTopics()
	g.tr = c.TracerProvider.Tracer("github.com/convoy-gcs/convoy")
	g.msgs = newMsgTracer(g.tr, c.traceEvery(), c.identity())
	if g.m, err = newMetrics(c.MeterProvider, c.Mode); err != nil {
		return nil, err
	}
	if err := g.openLog(ctx); err != nil {
		g.release()
		return nil, err
	}
	return g, nil
}

// View returns the last view handed to the application (Config.OnView),
// and whether this member takes part in it: false before the first view
// and after an exclusion, until the view that admits it again.
func (g *Group) View() (View, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	v := g.mu.view
	v.Members = slices.Clone(v.Members)
	return v, v.Epoch != 0 && !v.Excluded
}

// dynamic reports whether views come from etcd.
func (g *Group) dynamic() bool { return g.cfg.Etcd != nil }

func staticResolver(members []Member) func(NodeID) (string, error) {
	addrs := make(map[NodeID]string, len(members))
	for _, m := range members {
		addrs[m.ID] = m.Addr
	}
	return func(id NodeID) (string, error) {
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", fmt.Errorf("convoy: node %d is not a member", id)
	}
}

func (g *Group) listen(resolve func(NodeID) (string, error)) (rdma.Endpoint, error) {
	listen := g.cfg.ListenAddr
	ep, err := rdma.ListenTCP(rdma.TCPConfig{
		ID:            g.cfg.Self,
		ListenAddr:    listen,
		Resolve:       resolve,
		TLS:           g.cfg.TLS,
		Logger:        g.cfg.Logger,
		MeterProvider: g.cfg.MeterProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("convoy: listen on %s: %w", listen, err)
	}
	return ep, nil
}

// received is called by multicast, in each sender's order, with a record
// from member rank of view v: from its data group (set -1), or from its
// group for the topics of subscriber set set (see viewTopic), which
// carries publish records of those topics only.
func (g *Group) received(v *view, rank, set int, msg []byte) {
	rec, err := ordering.DecodeRecord(msg, g.cfg.MaxMessageBytes)
	if err == nil {
		err = v.checkChannel(set, &rec)
	}
	if err != nil {
		g.m.rejected.Add(context.Background(), 1)
		g.log.Warn("rejected record", "from", v.ids[rank], "epoch", v.rec.Epoch, "err", err)
		return
	}
	if g.cfg.test.onHeld != nil && rec.Kind == ordering.KindData {
		g.cfg.test.onHeld(rank, v.rec.Sent[rank]+rec.Seq)
	}
	g.post(event{kind: evRecord, v: v, from: rank, rec: rec})
}

// post hands ev to the loop unless the group is closing, or failed (its
// context is then cancelled: see member.withdraw).
func (g *Group) post(ev event) {
	if g.host != nil {
		g.host.post(g, ev)
		return
	}
	if tryPut(g.events, ev) {
		return
	}
	select {
	case g.events <- ev:
	case <-g.stop:
	case <-g.ctx.Done():
	}
}

// sent is called by this member's data group of view v, in order, once a
// record it multicast has reached every member.
func (g *Group) sent(v *view, frame []byte) {
	if len(frame) == 0 {
		return
	}
	kind := ordering.Kind(frame[0])
	payload := len(frame) - ordering.RecordHeaderBytes
	if kind == ordering.KindPublish {
		payload -= 4 // the topic
	}
	if cap(frame) == smallFrameBytes {
		g.frames.Put(&frame)
	}
	if kind != ordering.KindData && kind != ordering.KindPublish {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.epoch != v.rec.Epoch || v.done.Load() {
		return // the window was recounted when the view ended
	}
	g.mu.sending--
	g.mu.sendingBytes -= payload
	g.spaceFreedLocked()
}

// smallFrameBytes is the capacity of recycled record buffers: records up
// to this size (beacons and small messages, the common case) are encoded
// into buffers the data group hands back through sent.
const smallFrameBytes = 512

// frame returns a buffer for a record of n encoded bytes.
func (g *Group) frame(n int) []byte {
	if n > smallFrameBytes {
		return make([]byte, 0, n)
	}
	if b, ok := g.frames.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, smallFrameBytes)
}

// failed is called by multicast when a group of view v fails.
func (g *Group) failed(v *view, err error) {
	g.post(event{kind: evFail, v: v, err: err})
}

// Close leaves the group: it stops delivery, closes the multicast groups
// (the other members see the group fail) and the endpoint Open made.
func (g *Group) Close() error {
	g.mu.Lock()
	if g.mu.closed {
		g.mu.Unlock()
		return nil
	}
	g.mu.closed = true
	g.wakeAllLocked(ErrClosed)
	g.mu.Unlock()
	close(g.stop)
	g.cancel()
	g.loopWG.Wait()
	g.closeViewReads()
	g.release()
	return nil
}

// release frees what newGroup and Open set up: the group's context, the
// endpoint Open made, the member's place in etcd, the durable log and the
// metrics, each if it is there. Close calls it once the loop has ended,
// and a failed Open before the loop runs.
func (g *Group) release() {
	g.cancel()
	g.closeTransport()
	if g.mem != nil {
		g.mem.close()
	}
	g.closeLog()
	g.m.close()
}

func (g *Group) closeLog() {
	if g.disk != nil {
		g.disk.Close()
	}
}

func (g *Group) closeTransport() {
	if g.ownEP && g.ep != nil {
		g.ep.Close()
	}
}

// Err returns the error the group failed with, or nil.
func (g *Group) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
}

func (g *Group) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mu.err != nil || g.mu.closed {
		return
	}
	g.mu.err = fmt.Errorf("%w: %w", ErrFailed, err)
	g.log.Warn("group failed", "err", err)
	g.wakeAllLocked(g.mu.err)
	if g.mem != nil {
		g.mem.failedOnce.Do(func() { close(g.mem.failed) })
	}
}

// errDoneLocked is the error Send reports once the group ended, or
// while this member takes part in no view; nil otherwise.
func (g *Group) errDoneLocked() error {
	switch {
	case g.mu.closed:
		return ErrClosed
	case g.mu.err != nil:
		return g.mu.err
	case g.mu.epoch == 0:
		return g.mu.out
	}
	return nil
}
