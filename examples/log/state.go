package sharedlog

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
)

// Errors of reads.
var (
	// ErrUnwritten is returned for a position at or beyond the tail
	// (HTTP 404 {"error":"unwritten"}).
	ErrUnwritten = errors.New("sharedlog: unwritten")
	// ErrTrimmed is returned for a position below the trim point (HTTP
	// 410 {"error":"trimmed"}).
	ErrTrimmed = errors.New("sharedlog: trimmed")
)

// Bounds on one range or stream read: a response holds at most
// MaxRangeEntries entries and, beyond its first entry, at most
// MaxRangeBytes bytes of entry data. A reader continues from the last
// position it got plus one.
const (
	MaxRangeEntries = 1000
	MaxRangeBytes   = 4 << 20
)

// Entry is one entry of the log, as range and stream reads return it
// (in JSON, data is base64).
type Entry struct {
	Position uint64 `json:"position"`
	Data     []byte `json:"data"`
}

// state is the replicated state machine: the log, its stream indexes and
// the results of recent requests. Deliveries change it on the group's
// goroutine (apply); requests read it concurrently; Snapshot and Restore
// move it between members.
type state struct {
	log *slog.Logger

	mu sync.RWMutex
	// applied is the index of the last delivery applied. Deliveries at or
	// below it are ignored (a replay after a restart).
	applied uint64
	// trim is the first position kept; entries[i] is at position trim+i,
	// so the tail (the next position written) is trim+len(entries).
	// Invariant: trim ≤ tail.
	trim    uint64
	entries []entry
	// streams maps a stream name to its positions, ascending, all ≥ trim.
	streams map[string][]uint64
	dedupe  dedupe
	// checkpoints counts the checkpoints that live (Checkpoint, Release):
	// while one does, trims and evictions leave the elements they drop
	// as they are, for the checkpoints that share them.
	checkpoints int
}

// entry is one entry of the log. Neither it nor its data is modified
// once appended (but cleared once trimmed, when no checkpoint shares it).
type entry struct {
	data    []byte
	streams []string
}

func newState(log *slog.Logger) *state {
	return &state{log: log, streams: make(map[string][]uint64), dedupe: newDedupe(DedupeLimit)}
}

// tailLocked returns the next position to be written. REQUIRES: s.mu.
func (s *state) tailLocked() uint64 { return s.trim + uint64(len(s.entries)) }

// apply applies the delivery at index with payload, and returns the key
// of the request it answers with its result (ok false: nothing to
// answer). It ignores a delivery at or below the last applied index and
// skips (and logs) a malformed payload.
func (s *state) apply(index uint64, payload []byte) (key string, r result, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index <= s.applied {
		return "", result{}, false
	}
	s.applied = index
	c, err := decodeCommand(payload)
	if err != nil {
		s.log.Warn("skipping a malformed command", "index", index, "bytes", len(payload), "err", err)
		return "", result{}, false
	}
	key = c.key()
	if c.kind == kindBarrier {
		return key, result{value: s.tailLocked(), index: index}, true
	}
	if r, ok := s.dedupe.get(key); ok {
		return key, r, true // a retry: answered with the original result
	}
	switch c.kind {
	case kindAppend:
		r = result{value: s.tailLocked(), index: index}
		s.entries = append(s.entries, entry{data: c.data, streams: c.streams})
		for _, name := range c.streams {
			s.streams[name] = append(s.streams[name], r.value)
		}
	case kindTrim:
		s.trimLocked(c.before)
		r = result{value: s.trim, index: index}
	}
	s.dedupe.put(key, r, s.checkpoints > 0)
	return key, r, true
}

// trimLocked drops the entries before position before (at most up to the
// tail). REQUIRES: s.mu held for writing.
func (s *state) trimLocked(before uint64) {
	before = min(before, s.tailLocked())
	if before <= s.trim {
		return
	}
	k := before - s.trim
	if s.checkpoints == 0 {
		clear(s.entries[:k]) // (what a checkpoint shares stays)
	}
	s.entries = shrink(s.entries[k:])
	s.trim = before
	for name, ps := range s.streams {
		i, _ := slices.BinarySearch(ps, before)
		if i == len(ps) {
			delete(s.streams, name)
			continue
		}
		s.streams[name] = shrink(ps[i:])
	}
}

// shrink reallocates s once it uses little of its array, so that
// trimmed entries are freed.
func shrink[T any](s []T) []T {
	if cap(s) > 1024 && len(s) < cap(s)/4 {
		return slices.Clone(s)
	}
	return s
}

// read returns the entry at pos.
func (s *state) read(pos uint64) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case pos < s.trim:
		return nil, ErrTrimmed
	case pos >= s.tailLocked():
		return nil, ErrUnwritten
	}
	return s.entries[pos-s.trim].data, nil
}

// tail returns the next position to be written, as far as this member
// has applied.
func (s *state) tail() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tailLocked()
}

// readRange returns the entries in [from, to) that are kept and written,
// bounded by MaxRangeEntries and MaxRangeBytes.
func (s *state) readRange(from, to uint64) []Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	from, to = max(from, s.trim), min(to, s.tailLocked())
	var b bounded
	for p := from; p < to && b.add(p, s.entries[p-s.trim].data); p++ {
	}
	return b.out
}

// readStream returns the entries of stream name at positions ≥ from, in
// order, bounded by MaxRangeEntries and MaxRangeBytes.
func (s *state) readStream(name string, from uint64) []Entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ps := s.streams[name]
	i, _ := slices.BinarySearch(ps, from)
	var b bounded
	for ; i < len(ps) && b.add(ps[i], s.entries[ps[i]-s.trim].data); i++ {
	}
	return b.out
}

// bounded collects a read's entries up to the bounds.
type bounded struct {
	out   []Entry
	bytes int
}

// add appends an entry unless the bounds are reached (the first entry
// always fits), and reports whether it did.
func (b *bounded) add(pos uint64, data []byte) bool {
	if len(b.out) >= MaxRangeEntries || len(b.out) > 0 && b.bytes+len(data) > MaxRangeBytes {
		return false
	}
	b.out = append(b.out, Entry{Position: pos, Data: data})
	b.bytes += len(data)
	return true
}

// progress is where the state stands.
type progress struct {
	applied, trim, tail uint64
}

func (s *state) progress() progress {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return progress{applied: s.applied, trim: s.trim, tail: s.tailLocked()}
}

// lookup returns the stored result of request key, if any.
func (s *state) lookup(key string) (result, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dedupe.get(key)
}
