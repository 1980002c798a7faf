package paxos

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"iter"
	"math"
	"slices"
	"strings"

	"github.com/google/btree"
)

// snapshotVersion is the first byte of every snapshot part. Restore
// reads parts of the earlier versions too, which members wrote before
// batches of commands existed (version 2: no result has a position in a
// batch) and before issued times existed (version 1: a state without
// clock or floor, whose results have no issued time either).
const (
	snapshotVersion   = 3
	snapshotVersionV2 = 2
	snapshotVersionV1 = 1
)

// maxSnapshotValue bounds a value read from a snapshot part.
const maxSnapshotValue = 1 << 30

// errBadSnapshot is wrapped by the errors of Restore for parts that do
// not decode or do not fit together.
var errBadSnapshot = errors.New("paxos: bad snapshot")

// partOf returns the part, out of of, that holds key (or request id).
// Every member computes the same, so that the parts of one snapshot,
// taken by different donors, fit together.
func partOf(key string, of int) int {
	h := fnv.New64a()
	h.Write([]byte(key))
	return int(h.Sum64() % uint64(of))
}

// checkpoint is the state as of a point: a clone of the state's tree of
// keys and a view of its queue of kept results, which the deliveries
// applied since do not change. It is the state machine's
// convoy.StateSnapshot.
type checkpoint struct {
	applied      uint64
	clock, floor int64
	data         *btree.BTreeG[pair]
	// results are the kept results, oldest first.
	results fifo
}

// checkpoint returns the state as it is now. It costs next to nothing:
// the tree's nodes are shared until either side changes them, and the
// queue's entries are never written once pushed.
func (s *state) checkpoint() *checkpoint {
	// Clone marks the tree copy-on-write: a change, so under the write
	// lock.
	s.mu.Lock()
	defer s.mu.Unlock()
	return &checkpoint{
		applied: s.mu.applied, clock: s.mu.clock, floor: s.mu.floor,
		data: s.mu.data.Clone(), results: s.mu.order.view(),
	}
}

// snapshot writes part `part` of `of` of the state as it is now.
func (s *state) snapshot(w io.Writer, part, of int) error {
	return s.checkpoint().Snapshot(w, part, of)
}

// Snapshot writes part `part` of `of` of the state as of the checkpoint:
// the applied index, the clock and the floor (in every part), then the
// keys and the kept write results that hash to the part, each in order
// (keys, request ids), so that a part's bytes depend only on the state.
// It may run concurrently with deliveries and with other calls.
//
// Format: the version byte; uvarints applied, part, of, clock, floor; a
// uvarint count of keys, each a length-prefixed key and value; a uvarint
// count of results, each a length-prefixed request id, a uvarint index,
// a uvarint position in the delivery's batch, a uvarint issued time (0:
// none) and an ok byte. Version 2 has no positions; version 1 no clock,
// floor or issued times either.
func (c *checkpoint) Snapshot(w io.Writer, part, of int) error {
	if of < 1 || part < 0 || part >= of {
		return fmt.Errorf("paxos: snapshot part %d of %d", part, of)
	}
	var keys uint64
	c.data.Ascend(func(p pair) bool {
		if partOf(p.key, of) == part {
			keys++
		}
		return true
	})
	results := keptInPart(c.results.all(), part, of)
	bw := bufio.NewWriter(w)
	var buf []byte
	buf = append(buf, snapshotVersion)
	buf = binary.AppendUvarint(buf, c.applied)
	buf = binary.AppendUvarint(buf, uint64(part))
	buf = binary.AppendUvarint(buf, uint64(of))
	buf = binary.AppendUvarint(buf, uint64(c.clock))
	buf = binary.AppendUvarint(buf, uint64(c.floor))
	buf = binary.AppendUvarint(buf, keys)
	bw.Write(buf)
	c.data.Ascend(func(p pair) bool {
		if partOf(p.key, of) == part {
			buf = appendField(buf[:0], []byte(p.key))
			buf = binary.AppendUvarint(buf, uint64(len(p.value)))
			bw.Write(buf)
			bw.Write(p.value)
		}
		return true
	})
	buf = binary.AppendUvarint(buf[:0], uint64(len(results)))
	bw.Write(buf)
	for _, k := range results {
		buf = appendField(buf[:0], []byte(k.id))
		buf = binary.AppendUvarint(buf, k.res.index)
		buf = binary.AppendUvarint(buf, uint64(k.pos))
		buf = binary.AppendUvarint(buf, uint64(k.issued))
		ok := byte(0)
		if k.res.ok {
			ok = 1
		}
		buf = append(buf, ok)
		bw.Write(buf)
	}
	return bw.Flush()
}

// keptInPart returns the kept results of ks whose request ids hash to
// part `part` of `of`, in request id order.
func keptInPart(ks iter.Seq[kept], part, of int) []kept {
	var out []kept
	for k := range ks {
		if partOf(k.id, of) == part {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b kept) int { return strings.Compare(a.id, b.id) })
	return out
}

// Release does nothing: the clones go with the checkpoint.
func (c *checkpoint) Release() {}

// restore replaces the whole state with the one the parts describe (all
// parts of one snapshot, in order). On error the state is unchanged.
func (s *state) restore(parts []io.Reader) error {
	data := btree.NewG(btreeDegree, pairLess)
	results := make(map[string]result)
	var order []kept
	var first partHeader
	for i, p := range parts {
		h, err := readPart(bufio.NewReader(p), i, len(parts), data, results, &order)
		if err != nil {
			return fmt.Errorf("%w: part %d of %d: %w", errBadSnapshot, i, len(parts), err)
		}
		if i == 0 {
			first = h
		} else if h != first {
			return fmt.Errorf("%w: part %d is at index %d (clock %d, floor %d), part 0 at %d (clock %d, floor %d)",
				errBadSnapshot, i, h.applied, h.clock, h.floor, first.applied, first.clock, first.floor)
		}
	}
	slices.SortFunc(order, func(a, b kept) int {
		return cmp.Or(cmp.Compare(a.res.index, b.res.index), cmp.Compare(a.pos, b.pos))
	})
	// Each write has an index and position of its own: two kept results
	// at one make no state, and the order they would be evicted in is not
	// defined.
	for i := 1; i < len(order); i++ {
		if a, b := order[i-1], order[i]; a.res.index == b.res.index && a.pos == b.pos {
			return fmt.Errorf("%w: kept results %q and %q both at index %d, position %d", errBadSnapshot, a.id, b.id, b.res.index, b.pos)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.data, s.mu.results, s.mu.applied = data, results, first.applied
	s.mu.clock, s.mu.floor = first.clock, first.floor
	s.mu.order = fifo{}
	for _, k := range order {
		s.mu.order.push(k)
	}
	// Nothing to do for a snapshot of a state with the same window:
	// apply evicts after every delivery.
	s.evictLocked()
	return nil
}

// partHeader is what every part of a snapshot repeats.
type partHeader struct {
	applied      uint64
	clock, floor int64
}

// readPart decodes part i of of into data, results and order and returns
// its header.
func readPart(r *bufio.Reader, i, of int, data *btree.BTreeG[pair], results map[string]result, order *[]kept) (partHeader, error) {
	var h partHeader
	v, err := r.ReadByte()
	if err != nil {
		return h, unexpected(err)
	}
	if v != snapshotVersion && v != snapshotVersionV2 && v != snapshotVersionV1 {
		return h, fmt.Errorf("version %d", v)
	}
	// applied, part, of, then clock and floor from version 2 on
	hdr := []uint64{0, 0, 0, 0, 0}
	if v == snapshotVersionV1 {
		hdr = hdr[:3]
	}
	for k := range hdr {
		if hdr[k], err = binary.ReadUvarint(r); err != nil {
			return h, unexpected(err)
		}
	}
	if hdr[1] != uint64(i) || hdr[2] != uint64(of) {
		return h, fmt.Errorf("it says it is part %d of %d", hdr[1], hdr[2])
	}
	h.applied = hdr[0]
	if v != snapshotVersionV1 {
		if hdr[3] > math.MaxInt64 || hdr[4] > hdr[3] {
			return h, fmt.Errorf("clock %d, floor %d", hdr[3], hdr[4])
		}
		h.clock, h.floor = int64(hdr[3]), int64(hdr[4])
	}
	keys, err := binary.ReadUvarint(r)
	if err != nil {
		return h, unexpected(err)
	}
	for range keys {
		k, err := readField(r, MaxKeyBytes)
		if err != nil {
			return h, fmt.Errorf("key: %w", err)
		}
		val, err := readField(r, maxSnapshotValue)
		if err != nil {
			return h, fmt.Errorf("value: %w", err)
		}
		if len(k) == 0 || data.Has(pair{key: string(k)}) {
			return h, fmt.Errorf("key %q empty or in two parts", k)
		}
		data.ReplaceOrInsert(pair{key: string(k), value: val})
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return h, unexpected(err)
	}
	for range n {
		id, err := readField(r, MaxRequestIDBytes)
		if err != nil {
			return h, fmt.Errorf("request id: %w", err)
		}
		index, err := binary.ReadUvarint(r)
		if err != nil {
			return h, unexpected(err)
		}
		var pos, issued uint64
		if v == snapshotVersion {
			if pos, err = binary.ReadUvarint(r); err != nil {
				return h, unexpected(err)
			}
		}
		if v != snapshotVersionV1 {
			if issued, err = binary.ReadUvarint(r); err != nil {
				return h, unexpected(err)
			}
		}
		ok, err := r.ReadByte()
		if err != nil {
			return h, unexpected(err)
		}
		if _, repeated := results[string(id)]; len(id) == 0 || ok > 1 || index == 0 || index > h.applied || pos > math.MaxUint32 || issued > uint64(h.clock) || repeated {
			return h, fmt.Errorf("result of %q: bad or repeated", id)
		}
		k := kept{id: string(id), issued: int64(issued), res: result{index: index, ok: ok == 1}, pos: uint32(pos)}
		results[k.id] = k.res
		*order = append(*order, k)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return h, errors.New("data after the part")
	}
	return h, nil
}

// readField reads a length-prefixed field of at most limit bytes. A large
// field grows with the bytes that arrive, so a corrupt length cannot make
// it allocate more than the part holds.
func readField(r *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, unexpected(err)
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%d bytes, limit %d", n, limit)
	}
	if n <= 64<<10 {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		return nil, unexpected(err)
	}
	return buf.Bytes(), nil
}

// unexpected turns the end of a part in the middle of a field into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
