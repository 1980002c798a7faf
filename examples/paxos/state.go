package paxos

import (
	"bytes"
	"log/slog"
	"sync"

	"github.com/google/btree"
)

// DedupeWindow is how many write results the state machine keeps for
// deduplication: the results of the most recent DedupeWindow writes, by
// delivery index, the same on every member. A write retried with the same
// request id after more than DedupeWindow later writes is applied again.
const DedupeWindow = 100_000

// result is what a write did, kept for its retries.
type result struct {
	// index is the delivery index at which the command was applied.
	index uint64
	// ok: for a delete, the key existed; for a cas, it swapped; for a
	// put, always true.
	ok bool
}

// state is the replicated key-value state: what every member builds from
// the same deliveries in the same order. apply, checkpoint and restore
// run on the group's delivery goroutine; get, snapshot, the accessors and
// a checkpoint's snapshot may run concurrently with them.
//
// The keys and the kept results are copy-on-write B-trees, so that a
// checkpoint (a clone of both, which costs nothing until either side
// changes) fixes the state at a point while deliveries go on changing
// it: snapshots are written from checkpoints, and never hold the state
// still.
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
		// results holds the results of recent writes by request id;
		// order lists the same ids by increasing index, oldest first, so
		// that eviction is the same on every member.
		results *btree.BTreeG[kept]
		order   fifo
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

// kept is the kept result of a request, in request id order.
type kept struct {
	id  string
	res result
}

func keptLess(a, b kept) bool { return a.id < b.id }

func newState(log *slog.Logger) *state {
	s := &state{log: log, window: DedupeWindow}
	s.mu.data = btree.NewG(btreeDegree, pairLess)
	s.mu.results = btree.NewG(btreeDegree, keptLess)
	return s
}

// effect is a delivery as the state machine saw it: the command and its
// result.
type effect struct {
	cmd command
	res result
}

// apply applies the delivery at index. It returns false for a delivery
// it ignores: one at or below the applied index, or a malformed payload
// (logged; it still counts as applied, as on every other member). A write
// whose request id has a kept result is not applied again: apply returns
// that result.
func (s *state) apply(index uint64, payload []byte) (effect, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.mu.applied {
		return effect{}, false
	}
	s.mu.applied = index
	c, err := decodeCommand(payload)
	if err != nil {
		s.log.Warn("skipping a malformed command", "index", index, "bytes", len(payload), "err", err)
		return effect{}, false
	}
	if c.op == opBarrier {
		return effect{cmd: c, res: result{index: index, ok: true}}, true
	}
	if k, ok := s.mu.results.Get(kept{id: c.id}); ok {
		return effect{cmd: c, res: k.res}, true
	}
	r := result{index: index, ok: true}
	old, exists := s.mu.data.Get(pair{key: c.key})
	switch c.op {
	case opPut:
		s.mu.data.ReplaceOrInsert(pair{key: c.key, value: c.value})
	case opDelete:
		r.ok = exists
		s.mu.data.Delete(pair{key: c.key})
	case opCAS:
		r.ok = exists == c.hasOld && (!exists || bytes.Equal(old.value, c.old))
		if r.ok {
			s.mu.data.ReplaceOrInsert(pair{key: c.key, value: c.value})
		}
	}
	s.rememberLocked(c.id, r)
	return effect{cmd: c, res: r}, true
}

// rememberLocked keeps r as id's result, evicting the oldest beyond the
// window. REQUIRES: s.mu held for writing.
func (s *state) rememberLocked(id string, r result) {
	s.mu.results.ReplaceOrInsert(kept{id: id, res: r})
	s.mu.order.push(entry{index: r.index, id: id})
	for s.mu.order.len() > s.window {
		s.mu.results.Delete(kept{id: s.mu.order.pop().id})
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
	k, ok := s.mu.results.Get(kept{id: id})
	return k.res, ok
}

// entry is one kept result in eviction order.
type entry struct {
	index uint64
	id    string
}

// fifo is a queue of entries.
type fifo struct {
	items []entry
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(e entry) { q.items = append(q.items, e) }

func (q *fifo) pop() entry {
	e := q.items[q.head]
	q.items[q.head] = entry{}
	q.head++
	// Reuse the front once it is half the slice.
	if q.head > len(q.items)/2 {
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return e
}

// all returns the entries, oldest first.
func (q *fifo) all() []entry { return q.items[q.head:] }
