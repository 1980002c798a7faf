package sharedlog

import "hash/fnv"

// DedupeLimit is how many request results the log remembers to answer
// retries: the results of the DedupeLimit most recent appends and trims,
// by delivery index. A retry whose original result was evicted is
// applied again (an append then lands a second time). The bound is a
// constant because every member must evict the same results.
const DedupeLimit = 100_000

// result is what applying a command produced.
type result struct {
	// value is, for an append, the entry's position; for a trim, the
	// trim point after it; for a barrier, the tail when it was applied.
	value uint64
	// index is the delivery index at which the request was first applied.
	index uint64
}

// dedupe maps request keys (see command.key) to their results, keeping
// the most recent limit of them. Every member stores and evicts the same
// results in the same order: results are added in delivery order, and
// the oldest goes first.
type dedupe struct {
	limit int
	byKey map[string]result
	// order lists the keys in byKey from oldest to newest (by result
	// index) in order[head:]; order[:head] are evicted slots.
	order []slot
	head  int
}

// slot is a key in dedupe.order, with its result and its hash (which
// snapshot part holds the result).
type slot struct {
	key  string
	hash uint32
	r    result
}

func keyHash(key string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return h.Sum32()
}

func newDedupe(limit int) dedupe {
	return dedupe{limit: limit, byKey: make(map[string]result)}
}

func (d *dedupe) get(key string) (result, bool) {
	r, ok := d.byKey[key]
	return r, ok
}

// put stores the result of a new request, whose index is higher than
// every stored one, and evicts the oldest beyond the limit. shared says a
// checkpoint shares order's slots: evicted ones are left as they are.
func (d *dedupe) put(key string, r result, shared bool) {
	d.byKey[key] = r
	d.order = append(d.order, slot{key: key, hash: keyHash(key), r: r})
	for len(d.byKey) > d.limit {
		delete(d.byKey, d.order[d.head].key)
		if !shared {
			d.order[d.head] = slot{}
		}
		d.head++
	}
	if d.head > 1024 && d.head*2 > len(d.order) {
		d.order = append([]slot(nil), d.order[d.head:]...)
		d.head = 0
	}
}

// each calls f for every stored result, oldest first, with its key's
// hash.
func (d *dedupe) each(f func(key string, hash uint32, r result) error) error {
	for _, s := range d.order[d.head:] {
		if err := f(s.key, s.hash, s.r); err != nil {
			return err
		}
	}
	return nil
}
