package sharedlog

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sync"
)

// snapshotVersion is the first byte of every snapshot part.
const snapshotVersion = 1

// errSnapshot is wrapped by the errors of Restore.
var errSnapshot = errors.New("sharedlog: bad snapshot")

// A snapshot of the state is cut into parts, each self-describing:
//
//	version (1 byte) | part | of | applied | trim | tail
//	count of results | each: index, request key, value
//	first position | count of entries | each: count of streams, each stream name, data
//
// (integers are unsigned varints, strings and data a length then bytes).
// Every part repeats applied, trim and tail. Part p holds the entries in
// the p-th of `of` equal slices of the positions [trim, tail), and the
// request results whose key hashes to p; Restore puts them back
// together and checks that the parts agree and cover every position.

// Snapshot writes part `part` of `of` of the state (convoy.StateMachine)
// as it is now; reads go on meanwhile.
func (s *state) Snapshot(w io.Writer, part, of int) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewLocked().Snapshot(w, part, of)
}

// checkpoint is the state as of a point (convoy.StateSnapshot): the
// slices of entries and of kept results as they were then. Deliveries
// applied since append beyond them, and trims and evictions leave the
// elements they drop as they are while a checkpoint lives
// (state.checkpoints), so a checkpoint reads its slices without a lock.
type checkpoint struct {
	s                   *state
	applied, trim, tail uint64
	entries             []entry
	results             []slot
	released            sync.Once
}

// Checkpoint fixes the state as it is now (convoy.Checkpointer): it
// copies no entry, and the group writes snapshots from it while
// deliveries go on.
func (s *state) Checkpoint() (*checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpoints++
	c := s.viewLocked()
	c.s = s
	return c, nil
}

// viewLocked returns the state as it is now, for as long as it holds
// still. REQUIRES: s.mu.
func (s *state) viewLocked() *checkpoint {
	d := &s.dedupe
	return &checkpoint{
		applied: s.applied, trim: s.trim, tail: s.tailLocked(),
		entries: s.entries[:len(s.entries):len(s.entries)],
		results: d.order[d.head:len(d.order):len(d.order)],
	}
}

// Release lets trims and evictions drop the elements the checkpoint
// shares again, once no checkpoint lives.
func (c *checkpoint) Release() {
	if c.s == nil {
		return
	}
	c.released.Do(func() {
		c.s.mu.Lock()
		c.s.checkpoints--
		c.s.mu.Unlock()
	})
}

// Snapshot writes part `part` of `of` of the state as of the checkpoint.
func (c *checkpoint) Snapshot(w io.Writer, part, of int) error {
	if of < 1 || part < 0 || part >= of {
		return fmt.Errorf("sharedlog: snapshot part %d of %d", part, of)
	}
	sw := snapWriter{w: bufio.NewWriterSize(w, 64<<10)}
	sw.byte(snapshotVersion)
	for _, v := range []uint64{uint64(part), uint64(of), c.applied, c.trim, c.tail} {
		sw.uvarint(v)
	}
	var results int
	for _, r := range c.results {
		if hashPart(r.hash, of) == part {
			results++
		}
	}
	sw.uvarint(uint64(results))
	for _, r := range c.results {
		if hashPart(r.hash, of) == part {
			sw.uvarint(r.r.index)
			sw.bytes([]byte(r.key))
			sw.uvarint(r.r.value)
		}
	}
	lo, hi := share(c.trim, c.tail, part, of)
	sw.uvarint(lo)
	sw.uvarint(hi - lo)
	for p := lo; p < hi && sw.err == nil; p++ {
		e := c.entries[p-c.trim]
		sw.uvarint(uint64(len(e.streams)))
		for _, name := range e.streams {
			sw.bytes([]byte(name))
		}
		sw.bytes(e.data)
	}
	if sw.err != nil {
		return sw.err
	}
	return sw.w.Flush()
}

// share returns the positions [lo, hi) of part `part` of `of` of
// [trim, tail).
func share(trim, tail uint64, part, of int) (lo, hi uint64) {
	at := func(k int) uint64 {
		// (tail-trim)*k/of without overflow: k ≤ of.
		h, l := bits.Mul64(tail-trim, uint64(k))
		q, _ := bits.Div64(h, l, uint64(of))
		return trim + q
	}
	return at(part), at(part + 1)
}

// hashPart returns the part that holds the result of the request whose
// key hashes to hash.
func hashPart(hash uint32, of int) int { return int(hash % uint32(of)) }

// Restore replaces the state with the one the parts describe
// (convoy.StateMachine). It checks them and changes nothing if they are
// inconsistent. No parts means the empty state.
func (s *state) Restore(parts []io.Reader) error {
	next := newState(s.log)
	next.dedupe.limit = s.dedupe.limit
	var head [5]uint64 // part, of, applied, trim, tail
	type stored struct {
		key string
		r   result
	}
	var results []stored
	pos := uint64(0)
	for i, r := range parts {
		sr := snapReader{r: bufio.NewReaderSize(r, 64<<10)}
		if v := sr.byte(); sr.err == nil && v != snapshotVersion {
			return fmt.Errorf("%w: part %d has version %d", errSnapshot, i, v)
		}
		var h [5]uint64
		for k := range h {
			h[k] = sr.uvarint()
		}
		if sr.err != nil {
			return fmt.Errorf("%w: part %d: %w", errSnapshot, i, sr.err)
		}
		if h[0] != uint64(i) || h[1] != uint64(len(parts)) || h[3] > h[4] {
			return fmt.Errorf("%w: part %d says part %d of %d, trim %d, tail %d", errSnapshot, i, h[0], h[1], h[3], h[4])
		}
		if i == 0 {
			head, pos = h, h[3]
			next.applied, next.trim = h[2], h[3]
		} else if [3]uint64(h[2:]) != [3]uint64(head[2:]) {
			return fmt.Errorf("%w: part %d is of another state (applied, trim, tail %v, not %v)", errSnapshot, i, h[2:], head[2:])
		}
		n := sr.uvarint()
		for k := uint64(0); k < n && sr.err == nil; k++ {
			var st stored
			st.r.index = sr.uvarint()
			st.key = string(sr.bytes(1 + MaxRequestID))
			st.r.value = sr.uvarint()
			results = append(results, st)
		}
		lo, count := sr.uvarint(), sr.uvarint()
		if sr.err == nil && (lo != pos || count > h[4]-lo) {
			return fmt.Errorf("%w: part %d holds %d entries from %d, expected from %d up to %d", errSnapshot, i, count, lo, pos, h[4])
		}
		for k := uint64(0); k < count && sr.err == nil; k++ {
			var e entry
			ns := sr.uvarint()
			if ns > MaxStreams {
				return fmt.Errorf("%w: part %d: an entry names %d streams", errSnapshot, i, ns)
			}
			for j := uint64(0); j < ns && sr.err == nil; j++ {
				name := string(sr.bytes(MaxStreamName))
				if err := validStream(name); sr.err == nil && err != nil {
					return fmt.Errorf("%w: part %d: %w", errSnapshot, i, err)
				}
				e.streams = append(e.streams, name)
			}
			e.data = sr.bytes(maxSnapshotData)
			next.entries = append(next.entries, e)
		}
		if sr.err != nil {
			return fmt.Errorf("%w: part %d: %w", errSnapshot, i, sr.err)
		}
		if _, err := sr.r.ReadByte(); err != io.EOF {
			return fmt.Errorf("%w: part %d: trailing bytes", errSnapshot, i)
		}
		pos += count
	}
	if len(parts) > 0 && pos != head[4] {
		return fmt.Errorf("%w: the parts hold positions up to %d, the tail is %d", errSnapshot, pos, head[4])
	}
	slices.SortFunc(results, func(a, b stored) int { return cmp.Compare(a.r.index, b.r.index) })
	for _, st := range results {
		if _, dup := next.dedupe.get(st.key); dup || st.key == "" {
			return fmt.Errorf("%w: request key %q stored twice or empty", errSnapshot, st.key)
		}
		next.dedupe.put(st.key, st.r, false)
	}
	for i, e := range next.entries {
		for _, name := range e.streams {
			next.streams[name] = append(next.streams[name], next.trim+uint64(i))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied, s.trim, s.entries, s.streams, s.dedupe = next.applied, next.trim, next.entries, next.streams, next.dedupe
	return nil
}

// maxSnapshotData bounds one entry's data in a snapshot.
const maxSnapshotData = 1 << 30

// snapWriter writes a snapshot part; the first error sticks.
type snapWriter struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (w *snapWriter) byte(b byte) {
	if w.err == nil {
		w.err = w.w.WriteByte(b)
	}
}

func (w *snapWriter) uvarint(v uint64) {
	if w.err == nil {
		_, w.err = w.w.Write(binary.AppendUvarint(w.buf[:0], v))
	}
}

func (w *snapWriter) bytes(b []byte) {
	w.uvarint(uint64(len(b)))
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// snapReader reads a snapshot part; the first error sticks and makes
// every later read return zero.
type snapReader struct {
	r   *bufio.Reader
	err error
}

func (r *snapReader) byte() byte {
	if r.err != nil {
		return 0
	}
	b, err := r.r.ReadByte()
	if err != nil {
		r.err = noEOF(err)
	}
	return b
}

func (r *snapReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(r.r)
	if err != nil {
		r.err = noEOF(err)
	}
	return v
}

// bytes reads a length-prefixed byte string of at most limit bytes. A
// long one is read as it comes rather than allocated up front.
func (r *snapReader) bytes(limit int) []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(limit) {
		r.err = fmt.Errorf("length %d beyond %d", n, limit)
		return nil
	}
	if n <= 64<<10 {
		b := make([]byte, n)
		if _, err := io.ReadFull(r.r, b); err != nil {
			r.err = noEOF(err)
			return nil
		}
		return b
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r.r, int64(n)); err != nil {
		r.err = noEOF(err)
		return nil
	}
	return buf.Bytes()
}

// noEOF turns an end of input inside a part into an error of its own.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
