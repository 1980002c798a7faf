package engine

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/barrier"
)

// simWire carries the views' traffic between the members of a simulated
// group in place of RDMC groups and queue pairs (Config.openNet): for each
// view and ordered pair of members, one FIFO per kind of traffic (data
// records, tree records up, tree records down, control signals), each
// frame delivered after a random delay of up to maxDelay, FIFOs chosen at
// random among those due. One goroutine delivers (run), or, on a stepped
// wire, the deterministic simulation (step).
//
// It keeps the failure semantics the runtime relies on. A view's data
// path between two members fails at both when their link breaks (a
// partition, a broken link, a crash) and at every other member when one
// of them closes the view: each member left gets evFail once, and
// evLinkDown for the control stream; frames in flight on the link are
// lost. A control stream opened again (viewNet.dial) works again once
// the link does. Frames to a member that has not opened the view yet wait
// for it.
type simWire struct {
	wake chan struct{} // capacity 1: there may be work
	done chan struct{}
	wg   sync.WaitGroup
	// now is the wire's clock. A stepped wire (newSteppedWire) has no
	// goroutine: kicked asks its simulation to call step, and the
	// notices of failures are posted at once (posting never blocks
	// there).
	now     func() time.Time
	stepped bool
	kicked  func()

	// extra, if set, adds to the delay of every frame on a FIFO; onFrame,
	// if set, sees every data frame handed to a member (both are set
	// before the wire carries anything).
	extra   func(pipeKey) time.Duration
	onFrame func(pipeKey, []byte)

	mu       sync.Mutex
	rng      *rand.Rand
	maxDelay time.Duration
	closed   bool
	cut      map[[2]NodeID]bool // partitioned pairs, until heal
	dead     map[NodeID]bool    // crashed members, until they start again
	nets     map[wireKey]*wireNet
	pipes    map[pipeKey]*pipe
	// due holds the FIFOs with a frame to deliver, by when their first
	// frame is due (a FIFO is in due, in waiting, or, empty, in neither);
	// waiting holds those whose receiver has not opened the view yet.
	due     pipeHeap
	waiting map[wireKey][]*pipe
}

type wireKey struct {
	epoch uint64
	id    NodeID
}

// Kinds of traffic, each with its own FIFO; the publish records of the
// topics of subscriber set s (viewTopic.set) take kind wireTopic+s.
const (
	wireData = iota
	wireUp
	wireDown
	wireCtrl
	wireTopic
)

type pipeKey struct {
	epoch    uint64
	from, to NodeID
	kind     int
}

// pipe is one FIFO.
type pipe struct {
	key    pipeKey
	q      []wireFrame
	last   time.Time // when the last frame queued is due
	broken bool      // frames are lost until the stream is opened again
	// queued: the pipe is in due or waiting; at and tie order it in due.
	queued bool
	at     time.Time
	tie    uint64
}

// pipeHeap orders FIFOs by when their first frame is due, then at random.
type pipeHeap []*pipe

func (h pipeHeap) Len() int { return len(h) }
func (h pipeHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].tie < h[j].tie
}
func (h pipeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pipeHeap) Push(x any)   { *h = append(*h, x.(*pipe)) }
func (h *pipeHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}

type wireFrame struct {
	due  time.Time
	data []byte   // a record (read only: every receiver shares it)
	imm  uint64   // a control signal
	m    *wireMsg // the multicast it belongs to, for data records
}

// wireMsg is a record multicast to the view: sent once every receiver
// has it.
type wireMsg struct {
	frame []byte
	left  int
	from  *wireNet
}

func newSimWire(seed uint64, maxDelay time.Duration) *simWire {
	w := &simWire{
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		rng: rand.New(rand.NewPCG(seed, seed^0x3a1e)), maxDelay: maxDelay,
		cut: make(map[[2]NodeID]bool), dead: make(map[NodeID]bool),
		nets: make(map[wireKey]*wireNet), pipes: make(map[pipeKey]*pipe),
		waiting: make(map[wireKey][]*pipe),
	}
	w.now = time.Now
	w.wg.Add(1)
	go w.run()
	return w
}

// newSteppedWire returns a wire without a goroutine of its own, for the
// deterministic simulation (stepsim_test.go): on the clock now, it calls
// kicked when it may have frames due, and the simulation then calls step.
func newSteppedWire(seed uint64, maxDelay time.Duration, now func() time.Time, kicked func()) *simWire {
	w := &simWire{
		done: make(chan struct{}),
		rng:  rand.New(rand.NewPCG(seed, seed^0x3a1e)), maxDelay: maxDelay,
		cut: make(map[[2]NodeID]bool), dead: make(map[NodeID]bool),
		nets: make(map[wireKey]*wireNet), pipes: make(map[pipeKey]*pipe),
		waiting: make(map[wireKey][]*pipe),
		now:     now, stepped: true, kicked: kicked,
	}
	return w
}

// spawn runs notices: on a goroutine of their own, since posting may wait
// for room in a loop's queue and the caller may be that loop; at once on
// a stepped wire.
func (w *simWire) spawn(f func()) {
	if w.stepped {
		f()
		return
	}
	go f()
}

// sortedKeys returns m's keys in cmp's order: the wire goes through its
// maps in an order the seed fixes.
func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	return keys
}

func wireKeyCmp(a, b wireKey) int {
	if a.epoch != b.epoch {
		return cmp.Compare(a.epoch, b.epoch)
	}
	return cmp.Compare(a.id, b.id)
}

func pipeKeyCmp(a, b pipeKey) int {
	switch {
	case a.epoch != b.epoch:
		return cmp.Compare(a.epoch, b.epoch)
	case a.from != b.from:
		return cmp.Compare(a.from, b.from)
	case a.to != b.to:
		return cmp.Compare(a.to, b.to)
	}
	return cmp.Compare(a.kind, b.kind)
}

func pairOf(a, b NodeID) [2]NodeID {
	if a > b {
		a, b = b, a
	}
	return [2]NodeID{a, b}
}

// close stops delivery.
func (w *simWire) close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.done)
	w.wg.Wait()
}

func (w *simWire) kick() {
	if w.stepped {
		w.kicked()
		return
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// open is Config.openNet.
func (w *simWire) open(_ context.Context, v *view) (viewNet, error) {
	self := v.ids[v.self]
	n := &wireNet{w: w, v: v, self: self, key: wireKey{v.rec.Epoch, self}}
	if v.g.cfg.FanOut >= 2 && v.g.cfg.Mode != Unordered {
		t, err := barrier.NewTree(v.self, len(v.ids), v.g.cfg.FanOut)
		if err != nil {
			return n, err
		}
		n.parent, n.kids = t.Parent(), t.Children()
	}
	var notes []func()
	w.mu.Lock()
	w.nets[n.key] = n
	for _, p := range w.waiting[n.key] {
		p.queued = false
		w.scheduleLocked(p)
	}
	delete(w.waiting, n.key)
	// A member of the view already gone, or cut off from this one: the
	// data path fails at once, as RDMC's connections would.
	for _, id := range v.ids {
		if id != self && (w.dead[id] || w.cut[pairOf(self, id)]) {
			notes = append(notes, n.failLocked(fmt.Errorf("member %d unreachable", id)))
			break
		}
	}
	w.mu.Unlock()
	w.kick()
	for _, f := range notes {
		w.spawn(f)
	}
	return n, nil
}

// revive: member id starts again (a new incarnation).
func (w *simWire) revive(id NodeID) {
	w.mu.Lock()
	delete(w.dead, id)
	w.mu.Unlock()
}

// crash: member id dies; its links break.
func (w *simWire) crash(id NodeID) {
	w.mu.Lock()
	w.dead[id] = true
	notes := w.breakLocked(func(a, b NodeID) bool { return a == id || b == id }, "crashed")
	w.mu.Unlock()
	runNotes(notes)
}

// breakLink breaks the link between a and b.
func (w *simWire) breakLink(a, b NodeID) {
	w.mu.Lock()
	notes := w.breakLocked(func(x, y NodeID) bool { return pairOf(x, y) == pairOf(a, b) }, "link broken")
	w.mu.Unlock()
	runNotes(notes)
}

// partition separates the sides until heal.
func (w *simWire) partition(sides ...[]NodeID) {
	w.mu.Lock()
	for i, a := range sides {
		for _, b := range sides[i+1:] {
			for _, x := range a {
				for _, y := range b {
					if x != y {
						w.cut[pairOf(x, y)] = true
					}
				}
			}
		}
	}
	notes := w.breakLocked(func(a, b NodeID) bool { return w.cut[pairOf(a, b)] }, "partitioned")
	w.mu.Unlock()
	runNotes(notes)
}

func (w *simWire) heal() {
	w.mu.Lock()
	clear(w.cut)
	w.mu.Unlock()
}

func runNotes(notes []func()) {
	for _, f := range notes {
		f()
	}
}

// breakLocked breaks every link between open views' members for which
// hit holds: the data paths fail at both ends, the control streams go
// down, and what was in flight is lost. It returns the notices to post,
// after w.mu is released.
func (w *simWire) breakLocked(hit func(a, b NodeID) bool, why string) []func() {
	var notes []func()
	for _, k := range sortedKeys(w.pipes, pipeKeyCmp) {
		p := w.pipes[k]
		if !hit(k.from, k.to) || p.broken {
			continue
		}
		p.broken, p.q = true, nil
		from, to := w.nets[wireKey{k.epoch, k.from}], w.nets[wireKey{k.epoch, k.to}]
		for _, end := range []struct {
			n    *wireNet
			peer NodeID
		}{{from, k.to}, {to, k.from}} {
			if end.n == nil || end.n.closed {
				continue
			}
			if k.kind != wireCtrl {
				notes = append(notes, end.n.failLocked(fmt.Errorf("link to %d: %s", end.peer, why)))
			} else if end.n == from {
				// The two directions are one connection: each end
				// hears of its break once, through the direction it
				// sends on.
				notes = append(notes, end.n.linkDown(end.peer))
			}
		}
	}
	// Views whose members are on both sides with nothing sent yet fail
	// too: their data paths cannot connect.
	for _, k := range sortedKeys(w.nets, wireKeyCmp) {
		n := w.nets[k]
		if n.closed {
			continue
		}
		for _, id := range n.v.ids {
			if id != k.id && hit(k.id, id) {
				notes = append(notes, n.failLocked(fmt.Errorf("link to %d: %s", id, why)))
				if n.ctrlOpen(id) {
					notes = append(notes, n.linkDown(id))
				}
			}
		}
	}
	return notes
}

// pipeLocked returns the FIFO of key, made if need be.
func (w *simWire) pipeLocked(key pipeKey) *pipe {
	p := w.pipes[key]
	if p == nil {
		p = &pipe{key: key}
		w.pipes[key] = p
		// A stream across a cut link or to a dead member is broken from
		// the start.
		p.broken = w.dead[key.to] || w.dead[key.from] || w.cut[pairOf(key.from, key.to)]
	}
	return p
}

// pushLocked queues f on p, due after a random delay and after the frame
// before it.
func (w *simWire) pushLocked(p *pipe, f wireFrame) bool {
	if p.broken {
		return false
	}
	due := w.now()
	if w.maxDelay > 0 {
		due = due.Add(time.Duration(w.rng.Int64N(int64(w.maxDelay) + 1)))
	}
	if w.extra != nil {
		due = due.Add(w.extra(p.key))
	}
	if !due.After(p.last) {
		due = p.last.Add(1) // after the frame before, never with it
	}
	f.due, p.last = due, due
	p.q = append(p.q, f)
	w.scheduleLocked(p)
	return true
}

// scheduleLocked puts p, if it has a frame and is in neither, in due.
func (w *simWire) scheduleLocked(p *pipe) {
	if p.queued || len(p.q) == 0 {
		return
	}
	p.queued, p.at, p.tie = true, p.q[0].due, w.rng.Uint64()
	heap.Push(&w.due, p)
}

// run delivers frames as they fall due.
func (w *simWire) run() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-w.done:
			return
		default:
		}
		if ok, wait := w.step(); ok {
			continue
		} else {
			timer.Reset(wait)
		}
		select {
		case <-w.wake:
		case <-timer.C:
		case <-w.done:
			return
		}
	}
}

// step delivers one frame that is due, and reports whether it did; if
// none is, it returns how long until the next one is (an hour: none is
// queued).
func (w *simWire) step() (bool, time.Duration) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false, time.Hour
	}
	var p *pipe
	for len(w.due) > 0 && p == nil {
		top := w.due[0]
		if len(top.q) == 0 || w.pipes[top.key] != top {
			heap.Pop(&w.due) // broken or closed meanwhile
			top.queued = false
			continue
		}
		if head := top.q[0].due; head.After(top.at) {
			// The stream was broken and opened again since it was
			// queued: it is due when its new first frame is.
			heap.Pop(&w.due)
			top.at = head
			heap.Push(&w.due, top)
			continue
		}
		if top.at.After(w.now()) {
			break
		}
		heap.Pop(&w.due)
		if w.nets[wireKey{top.key.epoch, top.key.to}] == nil {
			// The receiver has not opened the view yet.
			k := wireKey{top.key.epoch, top.key.to}
			w.waiting[k] = append(w.waiting[k], top)
			continue
		}
		top.queued = false
		p = top
	}
	if p == nil {
		wait := time.Hour
		if len(w.due) > 0 {
			wait = w.due[0].at.Sub(w.now())
		}
		w.mu.Unlock()
		return false, wait
	}
	f := p.q[0]
	p.q = p.q[1:]
	w.scheduleLocked(p)
	to := w.nets[wireKey{p.key.epoch, p.key.to}]
	from := w.nets[wireKey{p.key.epoch, p.key.from}]
	var sent func()
	if f.m != nil {
		f.m.left--
		if f.m.left == 0 && from != nil && !from.closed {
			m := f.m
			sent = func() { m.from.v.g.sent(m.from.v, m.frame) }
		}
	}
	key := p.key
	w.mu.Unlock()
	if w.onFrame != nil && f.data != nil {
		w.onFrame(key, f.data)
	}
	to.receive(key, f)
	if sent != nil {
		sent()
	}
	return true, 0
}

// wireNet is one member's view on the wire.
type wireNet struct {
	w    *simWire
	v    *view
	self NodeID
	key  wireKey
	// parent and kids are this member's neighbours in the aggregation
	// tree, by rank (parent -1: none).
	parent int
	kids   []int
	// Guarded by w.mu:
	closed bool
	failed bool
}

var errWireFailed = errors.New("simulated data path failed")

// failLocked marks the data path failed and returns the notice to post.
func (n *wireNet) failLocked(err error) func() {
	if n.failed {
		return func() {}
	}
	n.failed = true
	return func() { n.v.g.failed(n.v, err) }
}

// linkDown returns the notice that the control stream to peer broke.
func (n *wireNet) linkDown(peer NodeID) func() {
	r := slices.Index(n.v.ids, peer)
	return func() { n.v.g.post(event{kind: evLinkDown, v: n.v, from: r}) }
}

// ctrlOpen reports whether a control stream to peer carries signals.
func (n *wireNet) ctrlOpen(peer NodeID) bool {
	p := n.w.pipes[pipeKey{n.key.epoch, n.self, peer, wireCtrl}]
	return p != nil && !p.broken
}

// receive hands f, from FIFO k, to this member's loop.
func (n *wireNet) receive(k pipeKey, f wireFrame) {
	from := slices.Index(n.v.ids, k.from)
	if k.kind != wireCtrl {
		set := -1
		if k.kind >= wireTopic {
			set = k.kind - wireTopic
		}
		n.v.g.received(n.v, from, set, f.data)
		return
	}
	kind := evSignal
	if durableSignal(f.imm) {
		kind = evPersisted
	}
	n.v.g.post(event{kind: kind, v: n.v, from: from, imm: f.imm})
}

func (n *wireNet) send(kind int, to []int, frame []byte, m *wireMsg) error {
	w := n.w
	w.mu.Lock()
	if n.failed || n.closed {
		w.mu.Unlock()
		return errWireFailed
	}
	data := slices.Clone(frame)
	for _, r := range to {
		w.pushLocked(w.pipeLocked(pipeKey{n.key.epoch, n.self, n.v.ids[r], kind}), wireFrame{data: data, m: m})
	}
	w.mu.Unlock()
	w.kick()
	return nil
}

func (n *wireNet) multicast(_ context.Context, frame []byte) error {
	var to []int
	for r := range n.v.ids {
		if r != n.v.self {
			to = append(to, r)
		}
	}
	if len(to) == 0 {
		n.v.g.sent(n.v, frame)
		return nil
	}
	return n.send(wireData, to, frame, &wireMsg{frame: frame, left: len(to), from: n})
}

func (n *wireNet) publish(_ context.Context, topic int, frame []byte) error {
	t := &n.v.topics[topic-1]
	var to []int
	for _, r := range t.ranks {
		if r != n.v.self {
			to = append(to, r)
		}
	}
	if len(to) == 0 {
		n.v.g.sent(n.v, frame)
		return nil
	}
	return n.send(wireTopic+t.set, to, frame, &wireMsg{frame: frame, left: len(to), from: n})
}

func (n *wireNet) up(_ context.Context, frame []byte) error {
	if n.parent < 0 {
		return fmt.Errorf("rank %d has no parent", n.v.self)
	}
	return n.send(wireUp, []int{n.parent}, frame, nil)
}

func (n *wireNet) down(_ context.Context, frame []byte) error {
	if len(n.kids) == 0 {
		return fmt.Errorf("rank %d has no children", n.v.self)
	}
	return n.send(wireDown, n.kids, frame, nil)
}

func (n *wireNet) children() int { return len(n.kids) }

// dial opens the control stream to rank r again: it carries signals in
// both directions while the link holds; across a cut link or to a dead
// member it fails at once, as a queue pair to an unreachable peer does.
func (n *wireNet) dial(_ context.Context, r int) bool {
	w := n.w
	peer := n.v.ids[r]
	w.mu.Lock()
	down := w.dead[peer] || w.cut[pairOf(n.self, peer)]
	for _, k := range []pipeKey{{n.key.epoch, n.self, peer, wireCtrl}, {n.key.epoch, peer, n.self, wireCtrl}} {
		p := w.pipeLocked(k)
		if !down {
			p.broken = false
		}
	}
	w.mu.Unlock()
	if down {
		w.spawn(n.linkDown(peer))
	}
	return true
}

func (n *wireNet) signal(r int, imm uint64) error {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.closed {
		return errWireFailed
	}
	p := w.pipes[pipeKey{n.key.epoch, n.self, n.v.ids[r], wireCtrl}]
	if p == nil {
		return errNoControl
	}
	if !w.pushLocked(p, wireFrame{imm: imm}) {
		return errWireFailed
	}
	w.kick()
	return nil
}

// close ends this member's part in the view: its streams close, what is
// in flight from and to it is lost, and the data path fails at the
// others, as RDMC's groups do when one member leaves them.
func (n *wireNet) close() {
	w := n.w
	w.mu.Lock()
	if n.closed {
		w.mu.Unlock()
		return
	}
	n.closed = true
	delete(w.nets, n.key)
	var notes []func()
	for _, k := range sortedKeys(w.pipes, pipeKeyCmp) {
		p := w.pipes[k]
		if k.epoch != n.key.epoch || k.from != n.self && k.to != n.self {
			continue
		}
		delete(w.pipes, k)
		if p.broken {
			continue
		}
		peer := k.to
		if peer == n.self {
			peer = k.from
		}
		if o := w.nets[wireKey{k.epoch, peer}]; o != nil && !o.closed && k.kind == wireCtrl && k.from == peer {
			notes = append(notes, o.linkDown(n.self))
		}
	}
	// Every multicast group of the view holds every member: the data path
	// fails at every other member, whether or not it exchanged anything
	// with this one yet.
	for _, k := range sortedKeys(w.nets, wireKeyCmp) {
		o := w.nets[k]
		if k.epoch == n.key.epoch && !o.closed {
			notes = append(notes, o.failLocked(fmt.Errorf("member %d left the view", n.self)))
		}
	}
	w.mu.Unlock()
	// Posting may wait for room in a loop's queue; the closing member's
	// own loop may be the caller, so the notices go out on their own.
	w.spawn(func() { runNotes(notes) })
}
