package convoy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/convoy-gcs/convoy/barrier"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

// Delivery is one message delivered in the group's agreed order.
type Delivery struct {
	// Epoch and Index place the message in the group's sequence; in
	// Atomic and TotalOrder modes every member gives a message the same
	// Index. In Unordered mode Index only counts this member's deliveries.
	Epoch, Index uint64
	// Sender is the member that sent the message, Seq its sequence number
	// among that member's messages (from 1), Timestamp its stamp.
	Sender    NodeID
	Seq       uint64
	Timestamp uint64
	// Payload is the message. It belongs to the handler.
	Payload []byte
}

// Handler receives deliveries, one at a time, in order. It runs on the
// group's own goroutine: while it runs, delivery waits. It must not call
// Close; it may call Send with a WaitAccepted level only.
type Handler func(Delivery)

// Group is one member's handle on a group. Its methods are safe for
// concurrent use.
type Group struct {
	cfg   Config
	self  int
	log   *slog.Logger
	m     *metrics
	h     Handler
	ep    rdma.Endpoint
	ownEP bool

	// The multicast groups of this member: data[j] is member j's data
	// group; up and down are this member's aggregation-tree groups and
	// treeIn the groups of its tree neighbours.
	data   []*multicast.Group
	up     *multicast.Group
	down   *multicast.Group
	treeIn []*multicast.Group

	events chan event
	stop   chan struct{}
	// ctx ends when the group closes; the loop's blocking calls use it.
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

	mu struct {
		sync.Mutex
		closed bool
		err    error
		// nextSeq is the sequence number the next accepted Send gets.
		nextSeq uint64
		// The window: own messages accepted and not yet delivered locally
		// (inflight), and not yet handed to every member by this member's
		// data group (sending). Send waits while either is full, so neither
		// the ordering buffers nor the multicast queue grow without bound.
		inflight, inflightBytes int
		sending, sendingBytes   int
		waiters                 map[uint64][]waiter
		delivered               uint64 // highest own seq delivered locally
		stable                  uint64 // highest own seq held by every member
	}
}

type eventKind uint8

const (
	evSend eventKind = iota
	evRecord
	evFail
)

type event struct {
	kind    eventKind
	from    int // evRecord: the sender's rank
	rec     ordering.Record
	payload []byte
	err     error
}

// Open joins this member to the group described by cfg. Every member must
// call Open with the same Members, Mode, BeaconInterval and FanOut; each
// waits for the others' connections as it needs them.
func Open(ctx context.Context, cfg Config, h Handler) (*Group, error) {
	c, self, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Group{
		cfg:      c,
		self:     self,
		log:      c.Logger.With("member", c.Self),
		h:        h,
		events:   make(chan event, 4096),
		sendTurn: make(chan struct{}, 1),
		space:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.mu.nextSeq = 1
	g.mu.waiters = make(map[uint64][]waiter)
	g.m, err = newMetrics(c.MeterProvider)
	if err != nil {
		return nil, err
	}
	if g.ep = c.Endpoint; g.ep == nil {
		if g.ep, err = g.listen(); err != nil {
			return nil, err
		}
		g.ownEP = true
	}
	core, err := ordering.NewCore(ordering.Config{
		Self: self, Members: len(c.Members), Mode: c.Mode, Epoch: c.Epoch,
		BeaconInterval: c.BeaconInterval, BeaconGap: c.BeaconGap, FanOut: c.FanOut, MaxPayload: c.MaxMessageBytes,
	}, c.Clock())
	if err != nil {
		g.cancel()
		g.closeTransport()
		return nil, err
	}
	if err := g.openMulticast(ctx); err != nil {
		g.cancel()
		g.closeTransport()
		return nil, err
	}
	g.loopWG.Add(1)
	go g.loop(core)
	return g, nil
}

func (g *Group) listen() (rdma.Endpoint, error) {
	addrs := make(map[NodeID]string, len(g.cfg.Members))
	for _, m := range g.cfg.Members {
		addrs[m.ID] = m.Addr
	}
	listen := g.cfg.ListenAddr
	if listen == "" {
		listen = addrs[g.cfg.Self]
	}
	ep, err := rdma.ListenTCP(rdma.TCPConfig{
		ID:         g.cfg.Self,
		ListenAddr: listen,
		Resolve: func(id NodeID) (string, error) {
			if a, ok := addrs[id]; ok {
				return a, nil
			}
			return "", fmt.Errorf("convoy: node %d is not a member", id)
		},
		TLS:           g.cfg.TLS,
		Logger:        g.cfg.Logger,
		MeterProvider: g.cfg.MeterProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("convoy: listen on %s: %w", listen, err)
	}
	return ep, nil
}

// Group ids: epoch, kind and the root's rank.
const (
	groupData = 0
	groupUp   = 1
	groupDown = 2
)

func (g *Group) groupID(kind, rank int) uint64 {
	return g.cfg.Epoch<<16 | uint64(kind)<<14 | uint64(rank)
}

func (g *Group) ids(ranks ...int) []rdma.NodeID {
	out := make([]rdma.NodeID, len(ranks))
	for i, r := range ranks {
		out[i] = g.cfg.Members[r].ID
	}
	return out
}

// openMulticast creates the data group of every member and, with
// aggregation, the tree groups this member takes part in.
func (g *Group) openMulticast(ctx context.Context) error {
	n := len(g.cfg.Members)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	open := func(kind, root int, ranks []int) (*multicast.Group, error) {
		cb := multicast.Callbacks{Failed: g.failed}
		switch {
		case root != g.self:
			cb.Complete = func(msg []byte) { g.received(root, msg) }
		case kind == groupData:
			cb.Complete = g.sent
		}
		return multicast.NewGroup(ctx, g.ep, multicast.GroupConfig{
			ID: g.groupID(kind, root), Members: g.ids(ranks...), Root: g.cfg.Members[root].ID,
			Algorithm: g.cfg.Algorithm, BlockBytes: g.cfg.BlockBytes,
			MaxMessageBytes:   g.cfg.MaxMessageBytes + ordering.RecordHeaderBytes,
			MaxQueuedMessages: g.cfg.WindowMessages + 1<<14, // beacons ride along
			MaxQueuedBytes:    g.cfg.WindowBytes + 1<<24,
			Logger:            g.cfg.Logger, MeterProvider: g.cfg.MeterProvider,
		}, cb)
	}
	for j := 0; j < n; j++ {
		mg, err := open(groupData, j, all)
		if err != nil {
			return err
		}
		g.data = append(g.data, mg)
	}
	if g.cfg.FanOut < 2 || g.cfg.Mode == Unordered {
		return nil
	}
	tree, err := barrier.NewTree(g.self, n, g.cfg.FanOut)
	if err != nil {
		return err
	}
	children := tree.Children()
	if p := tree.Parent(); p >= 0 {
		if g.up, err = open(groupUp, g.self, []int{g.self, p}); err != nil {
			return err
		}
		in, err := open(groupDown, p, append([]int{p}, siblings(p, n, g.cfg.FanOut)...))
		if err != nil {
			return err
		}
		g.treeIn = append(g.treeIn, in)
	}
	if len(children) > 0 {
		if g.down, err = open(groupDown, g.self, append([]int{g.self}, children...)); err != nil {
			return err
		}
		for _, c := range children {
			in, err := open(groupUp, c, []int{c, g.self})
			if err != nil {
				return err
			}
			g.treeIn = append(g.treeIn, in)
		}
	}
	return nil
}

// siblings returns the children of rank p in the tree.
func siblings(p, n, fanOut int) []int {
	t, err := barrier.NewTree(p, n, fanOut)
	if err != nil {
		return nil
	}
	return t.Children()
}

// received is called by multicast, in each sender's order, with a record
// from member rank.
func (g *Group) received(rank int, msg []byte) {
	rec, err := ordering.DecodeRecord(msg, g.cfg.MaxMessageBytes)
	if err != nil {
		g.m.rejected.Add(context.Background(), 1)
		g.log.Warn("rejected record", "from", g.cfg.Members[rank].ID, "err", err)
		return
	}
	if g.cfg.onHeld != nil && rec.Kind == ordering.KindData {
		g.cfg.onHeld(rank, rec.Seq)
	}
	select {
	case g.events <- event{kind: evRecord, from: rank, rec: rec}:
	case <-g.stop:
	}
}

// sent is called by this member's data group, in order, once a record it
// multicast has reached every member.
func (g *Group) sent(frame []byte) {
	if len(frame) == 0 {
		return
	}
	kind := ordering.Kind(frame[0])
	if cap(frame) == smallFrameBytes {
		g.frames.Put(&frame)
	}
	if kind != ordering.KindData {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.mu.sending--
	g.mu.sendingBytes -= len(frame) - ordering.RecordHeaderBytes
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

// failed is called by multicast when a group fails.
func (g *Group) failed(err error) {
	select {
	case g.events <- event{kind: evFail, err: err}:
	case <-g.stop:
	}
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
	g.closeTransport()
	return nil
}

func (g *Group) closeTransport() {
	for _, mg := range g.allMulticast() {
		mg.Close()
	}
	if g.ownEP && g.ep != nil {
		g.ep.Close()
	}
}

func (g *Group) allMulticast() []*multicast.Group {
	var all []*multicast.Group
	all = append(all, g.data...)
	for _, mg := range []*multicast.Group{g.up, g.down} {
		if mg != nil {
			all = append(all, mg)
		}
	}
	return append(all, g.treeIn...)
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
}

// errDone is the error Send reports once the group ended, or nil.
func (g *Group) errDoneLocked() error {
	switch {
	case g.mu.closed:
		return ErrClosed
	case g.mu.err != nil:
		return g.mu.err
	}
	return nil
}
