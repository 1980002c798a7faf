package paxos

import (
	"bytes"
	"iter"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/btree"
)

// DedupeWindow is how many write results the state machine keeps at
// most for deduplication: of the most recent writes, by delivery index,
// the same on every member. A result evicted for the window before it
// expired raises the floor to its issued time, and every write issued no
// later expires (see the package documentation's "Retries"). It must be
// the same on every member of a group.
const DedupeWindow = 100_000

// RequestLifetime is how long after its issued time (the time of the
// first attempt of its request that may have reached the group) a write
// may be applied: a write delivered once the state machine's clock (the
// latest issued time of the commands delivered) is more than
// RequestLifetime past its issued time is not applied, but answered as
// expired, and a kept result is evicted once it has expired. It must be
// the same on every member of a group.
const RequestLifetime = time.Minute

// result is what a write did, kept for its retries.
type result struct {
	// index is the delivery index at which the command was applied, or,
	// if it expired, at which it was delivered.
	index uint64
	// ok: for a delete, the key existed; for a cas, it swapped; for a
	// put, always true.
	ok bool
	// expired says the write was not applied: it was delivered after its
	// request's lifetime (see RequestLifetime). Expired results are not
	// kept.
	expired bool
}

// state is the replicated key-value state: what every member builds from
// the same deliveries in the same order. apply, checkpoint and restore
// run on the group's delivery goroutine; get, snapshot, the accessors and
// a checkpoint's snapshot may run concurrently with them.
//
// The keys are a copy-on-write B-tree, and the kept results a queue
// whose entries are never written once pushed, so that a checkpoint (a
// clone of the tree, which costs nothing until either side changes, and
// a view of the queue) fixes the state at a point while deliveries go on
// changing it: snapshots are written from checkpoints, and never hold
// the state still. The kept results are found by request id through a
// map, which checkpoints leave out.
type state struct {
	log *slog.Logger
	// window bounds results (DedupeWindow; smaller in tests).
	window int

	mu struct {
		sync.RWMutex
		data *btree.BTreeG[pair]
		// applied is the index of the last delivery applied; deliveries
		// at or below it are ignored.
		applied uint64
		// order holds the results of recent writes by increasing index
		// and position, oldest first, so that eviction is the same on
		// every member; results holds the same results by request id.
		order   fifo
		results map[string]result
		// clock is the latest issued time of the well-formed commands
		// applied (0: none yet), and floor the latest issued time of the
		// results evicted before they expired: a write issued at or
		// before floor may be a retry of one of them, and is not applied.
		clock, floor int64
		// batch is apply's buffer for the commands of a delivery.
		batch []command
	}
}

// btreeDegree is the degree of the state's B-trees.
const btreeDegree = 32

// pair is a key and its value, in key order.
type pair struct {
	key   string
	value []byte
}

func pairLess(a, b pair) bool { return a.key < b.key }

// kept is the kept result of a request.
type kept struct {
	id string
	// issued is the write's issued time (0: none, a version 1 command).
	issued int64
	res    result
	// pos is the write's position in its delivery's batch (0 for a
	// delivery of one command): with res.index, it orders the results.
	pos uint32
}

func newState(log *slog.Logger) *state {
	s := &state{log: log, window: DedupeWindow}
	s.mu.data = btree.NewG(btreeDegree, pairLess)
	s.mu.results = make(map[string]result)
	return s
}

// effect is a delivery as the state machine saw it: the command and its
// result.
type effect struct {
	cmd command
	res result
}

// apply applies the delivery at index, one command or a batch of them in
// order, and appends their effects to dst. It appends nothing for a
// delivery it ignores: one at or below the applied index, or a malformed
// payload (logged; it still counts as applied, as on every other
// member). A write whose request id has a kept result is not applied
// again: its effect carries that result. A write that expired (see
// RequestLifetime) is not applied either: its result says so.
//
// Why no write is applied twice, if all the attempts of one request carry
// the same issued time t: while the result of an attempt is kept, the
// others get it. It stops being kept either because it expired, once the
// clock passed t + RequestLifetime — the clock never goes back, so every
// later attempt expires too — or because DedupeWindow later writes came
// before it expired, which raises floor to at least t — floor never goes
// back either, so every later attempt, issued at t ≤ floor, expires.
// Commands of version 1 carry no issued time: they never expire, do not
// move the clock, and are deduplicated within the window only, as before.
func (s *state) apply(dst []effect, index uint64, payload []byte) []effect {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.mu.applied {
		return dst
	}
	s.mu.applied = index
	cs, err := decodeCommands(s.mu.batch[:0], payload)
	s.mu.batch = cs[:0]
	if err != nil {
		s.log.Warn("skipping a malformed delivery", "index", index, "bytes", len(payload), "err", err)
		return dst
	}
	for pos, c := range cs {
		if len(cs) > 1 {
			// A value the store keeps would hold the whole batch's
			// payload in memory, as long as it is kept.
			c.value = bytes.Clone(c.value)
		}
		dst = append(dst, s.applyLocked(index, uint32(pos), c))
	}
	clear(cs)
	return dst
}

// applyLocked applies command c, at position pos of the delivery at
// index. REQUIRES: s.mu held for writing.
func (s *state) applyLocked(index uint64, pos uint32, c command) effect {
	s.mu.clock = max(s.mu.clock, c.issued)
	// Whatever the command, the clock may have moved: the results it
	// expired go now, so that the state after each command (and in a
	// snapshot) keeps only unexpired ones.
	defer s.evictLocked()
	if c.op == opBarrier {
		return effect{cmd: c, res: result{index: index, ok: true}}
	}
	if kr, ok := s.mu.results[c.id]; ok {
		return effect{cmd: c, res: kr}
	}
	if c.issued > 0 && (s.expiredLocked(c.issued) || c.issued <= s.mu.floor) {
		return effect{cmd: c, res: result{index: index, expired: true}}
	}
	r := result{index: index, ok: true}
	switch c.op { // one descent of the tree each, but for a CAS that writes
	case opPut:
		s.mu.data.ReplaceOrInsert(pair{key: c.key, value: c.value})
	case opDelete:
		_, r.ok = s.mu.data.Delete(pair{key: c.key})
	case opCAS:
		old, exists := s.mu.data.Get(pair{key: c.key})
		r.ok = exists == c.hasOld && (!exists || bytes.Equal(old.value, c.old))
		if r.ok {
			s.mu.data.ReplaceOrInsert(pair{key: c.key, value: c.value})
		}
	}
	s.mu.results[c.id] = r
	s.mu.order.push(kept{id: c.id, issued: c.issued, res: r, pos: pos})
	return effect{cmd: c, res: r}
}

// expiredLocked reports whether a write issued at issued (> 0, at most
// the clock) has expired. REQUIRES: s.mu held.
func (s *state) expiredLocked(issued int64) bool {
	return s.mu.clock-issued > int64(RequestLifetime)
}

// evictLocked drops the oldest kept results while they have expired,
// then beyond the window; a result dropped before it expired raises the
// floor to its issued time. Results of version 1 commands never expire,
// and leave the floor as it is. REQUIRES: s.mu held for writing.
func (s *state) evictLocked() {
	for s.mu.order.len() > 0 {
		e := s.mu.order.front()
		if e.issued == 0 || !s.expiredLocked(e.issued) {
			break
		}
		s.mu.order.pop()
		delete(s.mu.results, e.id)
	}
	for s.mu.order.len() > s.window {
		e := s.mu.order.pop()
		delete(s.mu.results, e.id)
		if e.issued > 0 && !s.expiredLocked(e.issued) {
			s.mu.floor = max(s.mu.floor, e.issued)
		}
	}
}

// get returns key's value, whether it exists, and the applied index the
// answer reflects. The value must not be modified.
func (s *state) get(key string) ([]byte, bool, uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.mu.data.Get(pair{key: key})
	return p.value, ok, s.mu.applied
}

// appliedIndex returns the index of the last delivery applied.
func (s *state) appliedIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.applied
}

// resultOf returns the kept result of request id.
func (s *state) resultOf(id string) (result, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r, ok := s.mu.results[id]
	return r, ok
}

// fifoChunk is how many kept results one chunk of a fifo holds.
const fifoChunk = 1024

// fifo is a queue of kept results, in chunks of fifoChunk allocated as
// it grows and dropped once popped, so that it never copies its entries.
// An entry is never written once pushed, not even to clear it when it
// is popped: the views it returns stay as they were, whatever it does
// next.
type fifo struct {
	// chunks hold the entries, the front at chunks[0][head]; every chunk
	// but the last is full.
	chunks [][]kept
	head   int
	n      int
}

func (q *fifo) len() int { return q.n }

func (q *fifo) push(k kept) {
	if len(q.chunks) == 0 || len(q.chunks[len(q.chunks)-1]) == fifoChunk {
		q.chunks = append(q.chunks, make([]kept, 0, fifoChunk))
	}
	last := &q.chunks[len(q.chunks)-1]
	*last = append(*last, k)
	q.n++
}

// front returns the oldest entry; the queue must not be empty.
func (q *fifo) front() kept { return q.chunks[0][q.head] }

// pop removes and returns the oldest entry; the queue must not be empty.
func (q *fifo) pop() kept {
	k := q.chunks[0][q.head]
	q.head++
	q.n--
	if q.head == fifoChunk {
		// The chunk goes once no view holds it (views hold copies of
		// the slice of chunks).
		q.chunks[0] = nil
		q.chunks, q.head = q.chunks[1:], 0
	}
	return k
}

// view returns the queue as it is now: a copy that pushes and pops on
// q never change, and that must not be pushed to or popped from itself.
func (q *fifo) view() fifo {
	v := fifo{chunks: slices.Clone(q.chunks), head: q.head, n: q.n}
	if len(v.chunks) > 0 {
		// Pushes to q fill its last chunk beyond the view's end.
		last := &v.chunks[len(v.chunks)-1]
		*last = slices.Clip(*last)
	}
	return v
}

// all yields the entries, oldest first.
func (q *fifo) all() iter.Seq[kept] {
	return func(yield func(kept) bool) {
		for i, c := range q.chunks {
			if i == 0 {
				c = c[q.head:]
			}
			for _, k := range c {
				if !yield(k) {
					return
				}
			}
		}
	}
}
