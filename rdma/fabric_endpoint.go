//go:build fabric

package rdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// FabricBuilt reports whether this program was built with the fabric
// backend (the fabric build tag).
const FabricBuilt = true

// ctrlSlots is the depth of a control endpoint's receive and send queues:
// how many control packets a peer may have in flight to this node. Both
// sides use the same value.
const ctrlSlots = 64

// ctrlAckAfter is how many freed control slots a node acknowledges in a
// packet of its own when it has nothing else to send.
const ctrlAckAfter = ctrlSlots / 4

// pollTimeoutMS bounds a wait for completions or events, so that a lost
// wake-up costs at most this long.
const pollTimeoutMS = 1000

// FabricEndpoint is an endpoint of the fabric backend: RDMA through
// libfabric (the fabric build tag). Each peer has one control connection,
// and each stream its own connected data endpoint, whose receive queue
// holds exactly the stream's posted buffers, so that transfers land in
// them directly; see the package documentation.
type FabricEndpoint struct {
	cfg         FabricConfig
	log         *slog.Logger
	f           *fiFabric
	info        fiInfo // of the listening endpoint
	addr        string
	provider    string
	immData     bool // immediate values travel as remote completion data
	hdrLen      int  // data header bytes: dataSeqLen or dataHeaderLen
	depth       int  // data endpoint queue depth
	maxTransfer int
	metrics     *endpointMetrics
	regs        *regCache
	scratch     [ctrlSlotLen]byte // the poller's copy of a received slot

	ctx     context.Context // canceled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup // every goroutine of the endpoint
	stopped atomic.Bool    // the poller and event loop are to exit

	mu struct {
		sync.Mutex
		closed bool
		conns  map[NodeID]*fabConn // the current connection to each peer
		eps    map[uint64]*fep     // every libfabric endpoint not yet freed, by id
		// doomed holds endpoints to close and free, which the event loop
		// does between events.
		doomed  []*fep
		nextID  uint64
		nextKey uint64
		cqUsed  int // completion queue entries reserved by queues
	}
}

var _ Endpoint = (*FabricEndpoint)(nil)

// ListenFabric opens cfg.Provider's fabric and starts listening on
// cfg.ListenAddr.
func ListenFabric(cfg FabricConfig) (*FabricEndpoint, error) {
	return listenFabric(cfg, false)
}

// listenFabric is ListenFabric; immInHeader sends immediate values in the
// data header even where the provider carries 8 bytes of remote
// completion data, as it must where it carries fewer (verbs: 4). Tests
// set it.
func listenFabric(cfg FabricConfig, immInHeader bool) (_ *FabricEndpoint, err error) {
	cfg, err = cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newEndpointMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.close()
		}
	}()
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("rdma: node %d: ListenAddr: %w", cfg.ID, err)
	}
	info, err := getInfo(cfg.Provider, host, port, true, "", "")
	if err != nil {
		return nil, fmt.Errorf("rdma: node %d: no connected endpoint (FI_EP_MSG) of provider %q at %s: %w", cfg.ID, cfg.Provider, cfg.ListenAddr, err)
	}
	e := &FabricEndpoint{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), info: info, metrics: m}
	if err := e.checkInfo(immInHeader); err != nil {
		info.free()
		return nil, err
	}
	e.f, err = openFabric(info, cfg.CQSize)
	if err != nil {
		info.free()
		return nil, fmt.Errorf("rdma: node %d: provider %s: %w", cfg.ID, e.provider, err)
	}
	if e.addr, err = e.f.listenAddr(); err != nil {
		e.f.close()
		info.free()
		return nil, fmt.Errorf("rdma: node %d: %w", cfg.ID, err)
	}
	e.regs = newRegCache(e.f, cfg.RegCacheBytes)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.mu.conns = make(map[NodeID]*fabConn)
	e.mu.eps = make(map[uint64]*fep)
	e.wg.Add(2)
	go e.pollLoop()
	go e.eventLoop()
	e.log.Debug("rdma: fabric endpoint listening", "addr", e.addr, "provider", e.provider)
	return e, nil
}

// checkInfo reads what the provider offers into e, or says why it will
// not do.
func (e *FabricEndpoint) checkInfo(immInHeader bool) error {
	i := e.info
	major, minor := i.provVersion()
	e.provider = fmt.Sprintf("%s %d.%d (fabric %s, domain %s)", i.provName(), major, minor, i.fabricName(), i.domainName())
	if tx, rx := i.iovLimit(); tx < 2 || rx < 2 {
		return fmt.Errorf("rdma: provider %s gathers %d and scatters %d buffers per transfer; the fabric backend needs 2", e.provider, tx, rx)
	}
	if i.txSize() < ctrlSlots || i.rxSize() < ctrlSlots {
		return fmt.Errorf("rdma: provider %s has queues of %d sends and %d receives; the fabric backend needs %d", e.provider, i.txSize(), i.rxSize(), ctrlSlots)
	}
	e.depth = min(e.cfg.QueueDepth, i.txSize(), i.rxSize())
	e.immData = i.cqDataSize() >= 8 && !immInHeader
	e.hdrLen = dataHeaderLen
	if e.immData {
		e.hdrLen = dataSeqLen
	}
	e.maxTransfer = e.cfg.MaxTransferBytes
	if m := i.maxMsgSize(); m > uint64(e.hdrLen) && m-uint64(e.hdrLen) < uint64(e.maxTransfer) {
		e.maxTransfer = int(m - uint64(e.hdrLen))
	}
	return nil
}

// ID returns this node's id.
func (e *FabricEndpoint) ID() NodeID { return e.cfg.ID }

// Addr returns the address the endpoint listens on, for peers' Resolve.
func (e *FabricEndpoint) Addr() string { return e.addr }

// Provider describes the libfabric provider the endpoint runs on: its
// name and version, fabric and domain (such as "tcp 117.0 (fabric
// 127.0.0.1/32, domain lo)").
func (e *FabricEndpoint) Provider() string { return e.provider }

// Open opens the queue pair for stream to peer. The control connection
// to peer is made if there is none; the stream's data endpoint is
// connected once both sides have opened the stream.
func (e *FabricEndpoint) Open(ctx context.Context, peer NodeID, stream StreamID, h Handler) (QueuePair, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("rdma: Open with a nil handler")
	}
	if peer == e.cfg.ID {
		return nil, fmt.Errorf("rdma: node %d cannot open a queue pair to itself", peer)
	}
	q := &fabQP{e: e}
	q.init(peer, stream, h)
	// A peer that this node connects to may have moved (restarted
	// elsewhere) while the connection to where it was stays up: a process
	// left behind there, say, which must not get the new queue pair.
	var addr string
	if e.cfg.ID < peer && e.cfg.Resolve != nil {
		addr, _ = e.cfg.Resolve(peer)
	}
	var stale *fabConn
	q.mu.Lock()
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		q.mu.Unlock()
		return nil, fmt.Errorf("rdma: endpoint %d: %w", e.cfg.ID, ErrClosed)
	}
	if e.mu.cqUsed+2*e.depth > e.cfg.CQSize {
		e.mu.Unlock()
		q.mu.Unlock()
		return nil, fmt.Errorf("rdma: node %d: the completion queue (CQSize %d) has no room for another stream's queues", e.cfg.ID, e.cfg.CQSize)
	}
	if old := e.mu.conns[peer]; old != nil && addr != "" && old.dialedElsewhere(addr) {
		stale = old
		delete(e.mu.conns, peer)
	}
	var c *fabConn
	var isNew bool
	var peerInst uint64
	var pending []ctrlRecord
	var paired bool
	for {
		c = e.mu.conns[peer]
		isNew = c == nil
		if isNew {
			c = newFabConn(e, peer)
			e.mu.conns[peer] = c
		}
		var err error
		peerInst, paired, pending, err = c.addStream(q)
		if errors.Is(err, errConnBroken) {
			delete(e.mu.conns, peer)
			continue
		}
		if err != nil {
			e.mu.Unlock()
			q.mu.Unlock()
			return nil, err
		}
		break
	}
	e.mu.cqUsed += 2 * e.depth
	q.cqReserved = true
	dial := isNew && c.lower
	if dial {
		e.wg.Add(1)
	}
	e.mu.Unlock()

	mustRun := false
	if paired {
		mustRun = q.pairLocked(peerInst, pending)
	}
	q.mu.Unlock()
	c.flush()

	if stale != nil {
		err := &connError{peer: peer, cause: fmt.Errorf("the peer moved to %s", addr)}
		stale.shutdown(err, err)
	}
	if isNew && !dial {
		c.awaitInbound()
	}
	if dial {
		go c.dial()
	}
	if mustRun {
		// Signals that arrived before Open run on their own goroutine, so
		// that no handler call starts before Open returns.
		e.goRun(q)
	}
	return q, nil
}

// goRun runs q's event queue on a goroutine of its own, for events that
// a caller of the API (who may hold its own locks) made due.
func (e *FabricEndpoint) goRun(q *fabQP) {
	if !e.track() {
		return
	}
	go func() {
		defer e.wg.Done()
		q.run()
	}()
}

// releaseCQ returns n completion queue entries reserved by a queue.
func (e *FabricEndpoint) releaseCQ(n int) {
	e.mu.Lock()
	e.mu.cqUsed -= n
	e.mu.Unlock()
}

// nextKey returns a fresh registration key.
func (e *FabricEndpoint) nextKey() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.nextKey++
	return 1<<63 | e.mu.nextKey
}

// Close closes every queue pair and connection of the endpoint, stops
// listening, waits for the endpoint's goroutines and releases what it
// holds in libfabric. Queue pairs get no Failed call.
func (e *FabricEndpoint) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil
	}
	e.mu.closed = true
	conns := make([]*fabConn, 0, len(e.mu.conns))
	for _, c := range e.mu.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()

	e.cancel()
	for _, c := range conns {
		c.shutdown(nil, nil)
	}
	e.stopped.Store(true)
	e.f.wakeCQ()
	e.f.wakeEQ()
	e.wg.Wait()

	// Nothing reads completions or events any more: close what is left,
	// endpoints before the registrations and queues they use.
	e.mu.Lock()
	eps := make([]*fep, 0, len(e.mu.eps))
	for _, p := range e.mu.eps {
		eps = append(eps, p)
	}
	e.mu.doomed = nil
	e.mu.Unlock()
	for _, p := range eps {
		p.free()
	}
	e.regs.closeAll()
	e.f.close()
	e.info.free()
	e.metrics.close()
	return nil
}

// track registers a goroutine about to start (a timer's) with the
// endpoint. It reports false, registering nothing, if the endpoint is
// closed; otherwise the caller must call e.wg.Done when finished.
func (e *FabricEndpoint) track() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return false
	}
	e.wg.Add(1)
	return true
}

// forget removes c from the connection table if it is still there.
func (e *FabricEndpoint) forget(c *fabConn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.conns[c.peer] == c {
		delete(e.mu.conns, c.peer)
	}
}

// lookup returns the libfabric endpoint with id, or nil.
func (e *FabricEndpoint) lookup(id uint64) *fep {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.eps[id]
}

// reportConnError logs a broken or refused connection and tells the hook.
func (e *FabricEndpoint) reportConnError(peer NodeID, err error) {
	e.metrics.add(e.metrics.connsBroken, 1)
	var perr *ProtocolError
	if errors.As(err, &perr) {
		e.metrics.reject(perr.kind)
		e.log.Warn("rdma: closed connection after bad input", "peer", peer, "err", err)
	} else {
		e.log.Info("rdma: connection lost", "peer", peer, "err", err)
	}
	if e.cfg.OnConnError != nil {
		e.cfg.OnConnError(peer, err)
	}
}

// pollLoop reads completions and hands each to the endpoint it belongs
// to. Handlers run on it.
func (e *FabricEndpoint) pollLoop() {
	defer e.wg.Done()
	comps := make([]fiComp, cqBatch)
	for !e.stopped.Load() {
		n, err := e.f.pollCQ(comps, pollTimeoutMS)
		if err != nil {
			e.log.Error("rdma: reading the completion queue failed", "err", err)
			e.pause()
			continue
		}
		for i := range n {
			e.complete(&comps[i])
		}
	}
}

// complete handles one completion. The slot of a receive is copied out
// and freed first, so that its handler may post receives again at once.
func (e *FabricEndpoint) complete(cp *fiComp) {
	id := uint64(cp.id)
	p := e.lookup(id >> opSlotBits)
	if p == nil {
		e.log.Error("rdma: completion for an unknown endpoint", "id", id)
		return
	}
	slot := int(id & (1<<opSlotBits - 1))
	c := completion{
		slot:  slot,
		n:     int(cp.len),
		data:  uint64(cp.data),
		flags: uint64(cp.flags),
		err:   int(cp.err),
	}
	if c.err != 0 {
		c.errText = fmt.Sprintf("%s (provider error %d)", fiStrerror(c.err), int(cp.prov_err))
	}
	var got []byte
	if p.isRecvSlot(slot) && c.err == 0 {
		n := min(c.n, p.slotLen)
		got = e.scratch[:n]
		copy(got, p.slot(slot)[:n])
	}
	p.completed(slot)
	switch p.kind {
	case fabKindControl:
		p.c.ctrlCompletion(p, c, got)
	case fabKindData:
		p.q.dataCompletion(p, c, got)
	}
}

// completion is one completion, as the handlers of connections and queue
// pairs see it.
type completion struct {
	slot    int
	n       int    // bytes received
	data    uint64 // remote completion data
	flags   uint64
	err     int // libfabric error code; 0 on success
	errText string
}

// canceled reports whether c is the flush of an operation on an endpoint
// that was shut down.
func (c completion) canceled() bool { return c.err == fiCanceled }

// eventLoop reads connection-management events.
func (e *FabricEndpoint) eventLoop() {
	defer e.wg.Done()
	var ev fiEvent
	for !e.stopped.Load() {
		e.freeDoomed()
		ok, err := e.f.readEQ(&ev, pollTimeoutMS)
		if err != nil {
			e.log.Error("rdma: reading the event queue failed", "err", err)
			e.pause()
			continue
		}
		if !ok || ev.err == 0 && uint32(ev.event) == eqNotify {
			continue // a wake-up (FI_NOTIFY is 0, as is an error's event)
		}
		e.event(&ev)
	}
}

// pause waits a little after an unexpected error of a loop, so that one
// that persists does not spin.
func (e *FabricEndpoint) pause() {
	t := time.NewTimer(10 * time.Millisecond)
	defer t.Stop()
	select {
	case <-e.ctx.Done():
	case <-t.C:
	}
}

// doom hands p to the event loop to close and free.
func (e *FabricEndpoint) doom(p *fep) {
	e.mu.Lock()
	e.mu.doomed = append(e.mu.doomed, p)
	e.mu.Unlock()
	e.f.wakeEQ()
}

// freeDoomed closes and frees the endpoints handed to doom. It runs on
// the event loop only.
func (e *FabricEndpoint) freeDoomed() {
	e.mu.Lock()
	doomed := e.mu.doomed
	e.mu.doomed = nil
	e.mu.Unlock()
	for _, p := range doomed {
		p.free()
	}
}

// event handles one connection-management event.
func (e *FabricEndpoint) event(ev *fiEvent) {
	kind := uint32(ev.event)
	if ev.err == 0 && kind == eqConnReq {
		e.connRequest(eventInfo(ev), eventData(ev))
		return
	}
	p := e.lookup(uint64(ev.ctx))
	if p == nil {
		return // an endpoint already freed
	}
	var cause error
	switch {
	case ev.err != 0:
		cause = &fiError{op: "connection", code: int(ev.err)}
	case kind == eqConnected:
		p.connected(eventData(ev))
		return
	case kind == eqShutdown:
		cause = errors.New("the peer closed the connection")
	default:
		return
	}
	p.down(cause)
}

// connected handles FI_CONNECTED for p.
func (p *fep) connected(data []byte) {
	if !p.markUp() {
		return
	}
	switch p.kind {
	case fabKindControl:
		p.c.ctrlConnected(p, data)
	case fabKindData:
		p.q.dataConnected(p, data)
	}
}

// down handles a connection that failed, was refused or shut down.
func (p *fep) down(cause error) {
	p.mu.Lock()
	wasUp := p.mu.state == fepUp
	p.mu.Unlock()
	switch p.kind {
	case fabKindControl:
		p.c.ctrlDown(p, wasUp, cause)
	case fabKindData:
		p.q.dataDown(p, cause)
	}
	p.shutdown()
}

// connRequest handles a connection request from a peer. It frees info,
// unless a queue pair keeps it to accept later.
func (e *FabricEndpoint) connRequest(info fiInfo, data []byte) {
	h, err := decodeFabHello(data)
	var perr *ProtocolError
	switch {
	case err != nil:
		perr = protocolError(0, 0, rejectHandshake, err.Error())
	case h.to != e.cfg.ID:
		perr = protocolError(h.from, 0, rejectIdentity, fmt.Sprintf("connection for node %d reached node %d", h.to, e.cfg.ID))
	case h.from == e.cfg.ID:
		perr = protocolError(h.from, 0, rejectIdentity, fmt.Sprintf("peer claims this node's own id %d", h.from))
	case h.from > e.cfg.ID:
		perr = protocolError(h.from, 0, rejectHandshake, fmt.Sprintf("node %d connected to node %d, but only the node with the lower id connects", h.from, e.cfg.ID))
	}
	if perr != nil {
		_ = e.f.reject(info)
		info.free()
		if e.ctx.Err() == nil {
			e.reportConnError(perr.Peer, fmt.Errorf("rdma: refused a connection: %w", perr))
		}
		return
	}
	switch h.kind {
	case fabKindControl:
		e.acceptControl(info, h)
		info.free()
	case fabKindData:
		e.acceptData(info, h)
	}
}

// acceptControl accepts the control connection of h.from. A connection to
// the peer that is already up is replaced: the peer connects again only
// after its side of the old one broke.
func (e *FabricEndpoint) acceptControl(info fiInfo, h fabHello) {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		_ = e.f.reject(info)
		return
	}
	old := e.mu.conns[h.from]
	c := old
	if c == nil || !c.acceptable() {
		c = newFabConn(e, h.from)
		e.mu.conns[h.from] = c
	}
	e.mu.Unlock()
	if old != nil && old != c {
		err := &connError{peer: h.from, cause: errors.New("replaced by a new connection from the peer")}
		old.shutdown(err, err)
	}
	c.accept(info, h)
}

// acceptData accepts the data connection of a stream, if it is the one
// the open queue pair expects; a stale one is refused.
func (e *FabricEndpoint) acceptData(info fiInfo, h fabHello) {
	e.mu.Lock()
	c := e.mu.conns[h.from]
	e.mu.Unlock()
	var q *fabQP
	if c != nil {
		q = c.streamFor(h.gen, h.stream)
	}
	if q == nil || !q.acceptData(info, h) {
		_ = e.f.reject(info)
		info.free()
	}
}
