package etcdsim

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// mvcc is the multi-version key space: the history of every key, by
// revision, as etcd's storage/mvcc keeps it.
//
// Invariants: compacted < rev; keys is sorted and holds exactly the keys
// of hist; every history is non-empty and ordered by revision, and at
// most one version of a key has a given revision.
type mvcc struct {
	// rev is the current revision: 1 for an empty store, one more after
	// every write transaction that changed something.
	rev int64
	// compacted is the revision of the last compaction, -1 before any:
	// reads below it fail, and history below it is gone.
	compacted int64
	keys      []string
	hist      map[string][]version
	// writing: the running write transaction changed a key already, at
	// revision rev+1, which its later reads see.
	writing bool
}

// version is one change of a key: a put, or a deletion (create == 0).
type version struct {
	rev    int64 // the revision of the change
	create int64 // the key's create revision; 0 for a deletion
	ver    int64 // the key's version: 1 at creation, +1 per put
	value  []byte
	lease  int64
}

func newMVCC() *mvcc {
	return &mvcc{rev: 1, compacted: -1, hist: make(map[string][]version)}
}

// readRev is the revision reads see: the current one, or the one being
// written once the running transaction changed something.
func (m *mvcc) readRev() int64 {
	if m.writing {
		return m.rev + 1
	}
	return m.rev
}

// endWrite ends a write transaction: the revision advances if it
// changed anything.
func (m *mvcc) endWrite() {
	if m.writing {
		m.rev++
		m.writing = false
	}
}

// at returns the version of key live at revision rev, if any.
func (m *mvcc) at(key string, rev int64) (version, bool) {
	h := m.hist[key]
	i, _ := slices.BinarySearchFunc(h, rev+1, func(v version, r int64) int { return cmp.Compare(v.rev, r) })
	if i == 0 || h[i-1].create == 0 {
		return version{}, false
	}
	return h[i-1], true
}

// bounds returns the indexes in keys of the range [key, end) as etcd
// reads it: an empty end means key alone, and "\x00" every key from key
// on.
func (m *mvcc) bounds(key, end []byte) (lo, hi int) {
	lo, _ = slices.BinarySearch(m.keys, string(key))
	switch {
	case len(end) == 0:
		if lo < len(m.keys) && m.keys[lo] == string(key) {
			return lo, lo + 1
		}
		return lo, lo
	case len(end) == 1 && end[0] == 0:
		return lo, len(m.keys)
	}
	hi, _ = slices.BinarySearch(m.keys, string(end))
	return lo, max(lo, hi)
}

// rangeKVs returns the key-values live in [key, end) at revision rev,
// sorted by key.
func (m *mvcc) rangeKVs(key, end []byte, rev int64) []*mvccpb.KeyValue {
	lo, hi := m.bounds(key, end)
	var kvs []*mvccpb.KeyValue
	for _, k := range m.keys[lo:hi] {
		if v, ok := m.at(k, rev); ok {
			kvs = append(kvs, v.kv(k))
		}
	}
	return kvs
}

// kv returns v of key as a fresh KeyValue, sharing nothing with the
// store.
func (v version) kv(key string) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{
		Key:            []byte(key),
		CreateRevision: v.create,
		ModRevision:    v.rev,
		Version:        v.ver,
		Value:          bytes.Clone(v.value),
		Lease:          v.lease,
	}
}

// put writes key at the revision being written.
func (m *mvcc) put(key string, value []byte, lease int64) {
	rev := m.rev + 1
	nv := version{rev: rev, create: rev, ver: 1, value: bytes.Clone(value), lease: lease}
	if cur, ok := m.at(key, rev); ok {
		nv.create, nv.ver = cur.create, cur.ver+1
	}
	m.add(key, nv)
}

// deleteRange deletes the keys live in [key, end) at the revision being
// written, in key order, and returns how many there were.
func (m *mvcc) deleteRange(key, end []byte) int64 {
	rev := m.rev + 1
	lo, hi := m.bounds(key, end)
	var n int64
	for _, k := range slices.Clone(m.keys[lo:hi]) {
		if _, ok := m.at(k, rev); ok {
			m.add(k, version{rev: rev})
			n++
		}
	}
	return n
}

func (m *mvcc) add(key string, v version) {
	h, ok := m.hist[key]
	if !ok {
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	m.hist[key] = append(h, v)
	m.writing = true
}

// compact forgets history below rev: a key keeps the version live at
// rev, if any, and every later one. REQUIRES: m.compacted < rev <= m.rev.
func (m *mvcc) compact(rev int64) {
	m.compacted = rev
	keys := m.keys[:0]
	for _, k := range m.keys {
		h := m.hist[k]
		i, _ := slices.BinarySearchFunc(h, rev+1, func(v version, r int64) int { return cmp.Compare(v.rev, r) })
		if i > 0 && h[i-1].create != 0 {
			i-- // live at rev: keep it
		}
		if h = h[i:]; len(h) == 0 {
			delete(m.hist, k)
			continue
		}
		m.hist[k] = slices.Clone(h)
		keys = append(keys, k)
	}
	clear(m.keys[len(keys):])
	m.keys = keys
}

// changedSince reports whether a key under prefix changed (was put or
// deleted) after revision rev. Before the compaction revision history is
// gone, and it reports true.
func (m *mvcc) changedSince(prefix string, rev int64) bool {
	if rev < m.compacted {
		return true
	}
	lo, _ := slices.BinarySearch(m.keys, prefix)
	for _, k := range m.keys[lo:] {
		if !strings.HasPrefix(k, prefix) {
			break
		}
		if h := m.hist[k]; h[len(h)-1].rev > rev {
			return true
		}
	}
	return false
}

// leased returns the keys live now that are attached to lease, sorted.
func (m *mvcc) leased(lease int64) []string {
	var keys []string
	for _, k := range m.keys {
		if v, ok := m.at(k, m.readRev()); ok && v.lease == lease {
			keys = append(keys, k)
		}
	}
	return keys
}
