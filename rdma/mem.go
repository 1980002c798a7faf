package rdma

import (
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// MemOptions configures a [MemFabric].
type MemOptions struct {
	// Seed seeds the generator that chooses delivery order and delays.
	Seed int64
	// MaxDelay bounds the random delay a frame waits before delivery. Zero
	// delivers as soon as possible. In Manual mode it is ignored unless
	// Now is set.
	MaxDelay time.Duration
	// Manual, when set, starts no goroutine: nothing is delivered and no
	// handler runs until the caller calls [MemFabric.Step],
	// [MemFabric.StepDue] or [MemFabric.RunUntilIdle]. Delivery order is
	// then a function of the seed and the sequence of calls alone (and,
	// with Now, of the times they are made at).
	Manual bool
	// Now, in Manual mode, is the clock frames are delayed on (by up to
	// MaxDelay): a simulation's virtual clock, with which it steps the
	// fabric by StepDue as frames fall due. Outside Manual mode the fabric
	// runs on the system's clock and Now must be nil.
	Now func() time.Time
	// OnWork, in Manual mode, is called when the fabric may have work
	// due: a frame was sent, a queue pair opened or closed, a link broke.
	// It is called with no lock held, possibly from a handler, and must
	// not call into the fabric; a simulation schedules a StepDue.
	OnWork func()
	// Logger receives the fabric's logs. Nil discards them.
	Logger *slog.Logger
}

// MemFabric is an in-process fabric that connects the endpoints it creates.
//
// Each direction of a connection is a FIFO; the fabric picks which
// connection delivers next at random (from Seed), and may hold frames for
// up to MaxDelay, so transfers on different connections are reordered but
// transfers on one connection never are. Payloads are copied from the
// sender's buffer into the receiver's at delivery, which then completes
// both. Handlers run on the fabric's goroutine (or, in Manual mode, on the
// goroutine calling Step).
//
// BreakLink and Crash inject faults. All methods are safe for concurrent
// use.
type MemFabric struct {
	log      *slog.Logger
	maxDelay time.Duration
	manual   bool
	now      func() time.Time // the clock of delays in Manual mode, or nil
	onWork   func()
	wake     chan struct{} // capacity 1: there may be work for the dispatcher
	done     chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu struct {
		sync.Mutex
		closed bool
		rng    *rand.Rand
		nodes  map[NodeID]*memEndpoint
		conns  map[memPair]*memConn // the current connection of each pair
		// cut holds the pairs a partition separates.
		cut    map[memPair]bool
		nextID uint64 // connection ids, for logs
		// active holds the directions with queued frames that may be
		// delivered now: with delays, those whose first frame was due when
		// last looked at; dir.activeIdx is each one's index. later holds
		// the other directions with queued frames, by the time their first
		// frame is due. A direction is in one of them, or in neither when
		// it has no frame.
		active []*memDir
		later  dirHeap
		// runnable holds the queue pairs whose event queue this fabric
		// must run (push told it to).
		runnable []*memQP
	}
}

// NewMemFabric returns a fabric with no endpoints. It panics if Now or
// OnWork is set outside Manual mode, which is a programming error.
func NewMemFabric(opts MemOptions) *MemFabric {
	if !opts.Manual && (opts.Now != nil || opts.OnWork != nil) {
		panic("rdma: MemOptions.Now and OnWork need Manual mode")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	f := &MemFabric{
		log:      log,
		maxDelay: opts.MaxDelay,
		manual:   opts.Manual,
		now:      opts.Now,
		onWork:   opts.OnWork,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	seed := uint64(opts.Seed)
	f.mu.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f.mu.nodes = make(map[NodeID]*memEndpoint)
	f.mu.conns = make(map[memPair]*memConn)
	if !f.manual {
		f.wg.Add(1)
		go f.dispatch()
	}
	return f
}

// Endpoint adds node id to the fabric and returns its endpoint. An id may be
// reused once its previous endpoint was closed or crashed (a restart).
func (f *MemFabric) Endpoint(id NodeID) (Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return nil, fmt.Errorf("rdma: mem fabric: %w", ErrClosed)
	}
	if old := f.mu.nodes[id]; old != nil && !old.dead {
		return nil, fmt.Errorf("rdma: mem fabric: node %d already has an endpoint", id)
	}
	ep := &memEndpoint{f: f, id: id, qps: make(map[qpKey]*memQP)}
	f.mu.nodes[id] = ep
	return ep, nil
}

// BreakLink breaks the current connection between a and b, if any: every
// queue pair on it, on both sides, fails with an error wrapping
// ErrConnectionLost, and frames in flight are lost. A later Open makes a
// new connection.
func (f *MemFabric) BreakLink(a, b NodeID) {
	f.mu.Lock()
	if c := f.mu.conns[makePair(a, b)]; c != nil {
		cause := fmt.Errorf("link %d-%d broken by fault injection", c.nodes[0], c.nodes[1])
		f.breakConnLocked(c, [2]error{
			&connError{peer: c.nodes[1], cause: cause},
			&connError{peer: c.nodes[0], cause: cause},
		}, -1)
	}
	f.mu.Unlock()
	f.kick()
}

// Partition separates the given sides from each other until Heal: the
// connections between nodes on different sides break as with BreakLink,
// and queue pairs opened across the partition fail with ErrUnreachable.
// Nodes not named keep their links to everyone.
func (f *MemFabric) Partition(sides ...[]NodeID) {
	f.mu.Lock()
	if f.mu.cut == nil {
		f.mu.cut = make(map[memPair]bool)
	}
	var broken []memPair
	for i, a := range sides {
		for _, b := range sides[i+1:] {
			for _, x := range a {
				for _, y := range b {
					if x != y {
						f.mu.cut[makePair(x, y)] = true
						broken = append(broken, makePair(x, y))
					}
				}
			}
		}
	}
	f.mu.Unlock()
	for _, p := range broken {
		f.BreakLink(p.lo, p.hi)
	}
}

// Heal ends every partition.
func (f *MemFabric) Heal() {
	f.mu.Lock()
	f.mu.cut = nil
	f.mu.Unlock()
}

// Crash kills node id: its connections break (peers' queue pairs fail with
// ErrConnectionLost), its own queue pairs stop without further handler
// calls, its Opens fail with ErrClosed, and peers' later Opens to it fail
// their queue pairs with ErrUnreachable.
func (f *MemFabric) Crash(id NodeID) {
	f.mu.Lock()
	if ep := f.mu.nodes[id]; ep != nil && !ep.dead {
		f.killLocked(ep, "crashed")
	}
	f.mu.Unlock()
	f.kick()
}

// Step, in Manual mode, performs one unit of work: it runs the handler
// calls that are ready or, if there are none, delivers one frame chosen at
// random and runs the calls that follow from it. It reports whether there
// was anything to do. Outside Manual mode it does nothing and returns false.
// Step must not be called from a handler.
func (f *MemFabric) Step() bool {
	if !f.manual {
		return false
	}
	did, _ := f.step(time.Time{})
	return did
}

// StepDue, in Manual mode, performs one unit of work as Step does, but
// delivers only a frame due by the clock MemOptions.Now (with no Now,
// any frame). If there was nothing to do, it reports false and how long
// until the next frame falls due (0: none is queued). Outside Manual
// mode it does nothing and returns false, 0. StepDue must not be called
// from a handler.
func (f *MemFabric) StepDue() (did bool, wait time.Duration) {
	if !f.manual {
		return false, 0
	}
	if f.now == nil {
		return f.step(time.Time{})
	}
	return f.step(f.now())
}

// delayed reports whether frames are held for a random delay.
func (f *MemFabric) delayed() bool {
	return f.maxDelay > 0 && (!f.manual || f.now != nil)
}

// clock is the time frames are due by.
func (f *MemFabric) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// RunUntilIdle, in Manual mode, calls Step until there is nothing left to
// do and returns the number of steps taken.
func (f *MemFabric) RunUntilIdle() int {
	n := 0
	for f.Step() {
		n++
	}
	return n
}

// Close stops the fabric: nothing more is delivered, no handler starts, and
// the fabric's goroutine exits. Endpoints' Opens then fail with ErrClosed.
func (f *MemFabric) Close() error {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return nil
	}
	f.mu.closed = true
	eps := make([]*memEndpoint, 0, len(f.mu.nodes))
	for _, ep := range f.mu.nodes {
		eps = append(eps, ep)
	}
	slices.SortFunc(eps, func(a, b *memEndpoint) int { return cmp.Compare(a.id, b.id) })
	for _, ep := range eps {
		if !ep.dead {
			f.killLocked(ep, "fabric closed")
		}
	}
	f.mu.runnable = nil
	f.mu.Unlock()
	close(f.done)
	f.wg.Wait()
	return nil
}

// kick wakes the dispatcher, or in Manual mode tells OnWork.
func (f *MemFabric) kick() {
	if f.onWork != nil {
		f.onWork()
		return
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// dispatch is the fabric's goroutine outside Manual mode.
func (f *MemFabric) dispatch() {
	defer f.wg.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-f.done:
			return
		default:
		}
		did, wait := f.step(time.Now())
		if did {
			continue
		}
		var timeout <-chan time.Time
		if wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			timeout = timer.C
		}
		select {
		case <-f.done:
			return
		case <-f.wake:
		case <-timeout:
		}
	}
}

// step runs the ready handler calls or, if there are none, delivers one
// frame whose time has come (any frame if now is zero or frames are not
// delayed) and runs the calls
// that follow. It reports whether it did anything and, if not, how long
// until the next frame is due (0 if none is queued).
func (f *MemFabric) step(now time.Time) (did bool, wait time.Duration) {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return false, 0
	}
	if len(f.mu.runnable) == 0 {
		d, wait := f.pickLocked(now)
		if d == nil {
			f.mu.Unlock()
			return false, wait
		}
		f.deliverLocked(d)
	}
	run := f.mu.runnable
	f.mu.runnable = nil
	f.mu.Unlock()
	for _, q := range run {
		q.run()
	}
	return true, 0
}

// pickLocked chooses at random a direction whose head frame is due.
// REQUIRES: f.mu.
func (f *MemFabric) pickLocked(now time.Time) (*memDir, time.Duration) {
	if !f.delayed() {
		// No frame is ever held: every direction with frames is due.
		if len(f.mu.active) == 0 {
			return nil, 0
		}
		return f.mu.active[f.mu.rng.IntN(len(f.mu.active))], 0
	}
	for len(f.mu.later) > 0 && (now.IsZero() || !f.mu.later[0].due().After(now)) {
		f.addActiveLocked(heap.Pop(&f.mu.later).(*memDir))
	}
	// A direction stays active after its first frame went until one of
	// its later frames is drawn while not yet due: it then waits among
	// the later ones. Drawing again until a due one comes up keeps the
	// choice uniform among the due directions, and the cost of a step
	// independent of how many directions have frames queued.
	for len(f.mu.active) > 0 {
		d := f.mu.active[f.mu.rng.IntN(len(f.mu.active))]
		if now.IsZero() || !d.due().After(now) {
			return d, 0
		}
		f.removeActiveLocked(d)
		heap.Push(&f.mu.later, d)
	}
	if len(f.mu.later) == 0 {
		return nil, 0
	}
	return nil, f.mu.later[0].due().Sub(now)
}

// pushLocked queues ev for q and, if q's queue needs a runner, schedules q.
// REQUIRES: f.mu.
func (f *MemFabric) pushLocked(q *memQP, ev qpEvent) {
	if q.push(ev) {
		f.mu.runnable = append(f.mu.runnable, q)
	}
}

// failQPLocked fails q with err and forgets it, leaving its connection up.
// REQUIRES: f.mu.
func (f *MemFabric) failQPLocked(q *memQP, err error) {
	if !q.markFailed(err) {
		return
	}
	q.detachLocked()
	f.pushLocked(q, qpEvent{kind: evFailed, err: err})
}

// killLocked stops endpoint ep: it breaks its connections and closes its
// queue pairs without handler calls. REQUIRES: f.mu.
func (f *MemFabric) killLocked(ep *memEndpoint, why string) {
	ep.dead = true
	conns := make([]*memConn, 0)
	for _, c := range f.mu.conns {
		if c.nodes[0] == ep.id || c.nodes[1] == ep.id {
			conns = append(conns, c)
		}
	}
	slices.SortFunc(conns, func(a, b *memConn) int { return cmp.Compare(a.id, b.id) })
	for _, c := range conns {
		side := c.sideOf(ep.id)
		var errs [2]error
		errs[1-side] = &connError{peer: ep.id, cause: fmt.Errorf("node %d %s", ep.id, why)}
		f.breakConnLocked(c, errs, side)
	}
	for _, q := range ep.sortedQPs() {
		q.markClosed()
		q.detachLocked()
	}
	f.log.Debug("rdma: mem node stopped", "node", ep.id, "reason", why)
}
