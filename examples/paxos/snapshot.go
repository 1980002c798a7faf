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
	"slices"

	"github.com/google/btree"
)

// snapshotVersion is the first byte of every snapshot part.
const snapshotVersion = 1

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

// checkpoint is the state as of a point: clones of the state's trees,
// which the deliveries applied since do not change. It is the state
// machine's convoy.StateSnapshot.
type checkpoint struct {
	applied uint64
	data    *btree.BTreeG[pair]
	results *btree.BTreeG[kept]
}

// checkpoint returns the state as it is now. It costs next to nothing:
// the trees' nodes are shared until either side changes them.
func (s *state) checkpoint() *checkpoint {
	// Clone marks both trees copy-on-write: a change, so under the
	// write lock.
	s.mu.Lock()
	defer s.mu.Unlock()
	return &checkpoint{applied: s.mu.applied, data: s.mu.data.Clone(), results: s.mu.results.Clone()}
}

// snapshot writes part `part` of `of` of the state as it is now.
func (s *state) snapshot(w io.Writer, part, of int) error {
	return s.checkpoint().Snapshot(w, part, of)
}

// Snapshot writes part `part` of `of` of the state as of the checkpoint:
// the applied index (in every part), then the keys and the kept write
// results that hash to the part, each in order (keys, request ids), so
// that a part's bytes depend only on the state. It may run concurrently
// with deliveries and with other calls.
//
// Format: the version byte; uvarints applied, part, of; a uvarint count
// of keys, each a length-prefixed key and value; a uvarint count of
// results, each a length-prefixed request id, a uvarint index and an ok
// byte.
func (c *checkpoint) Snapshot(w io.Writer, part, of int) error {
	if of < 1 || part < 0 || part >= of {
		return fmt.Errorf("paxos: snapshot part %d of %d", part, of)
	}
	var keys, ids uint64
	c.data.Ascend(func(p pair) bool {
		if partOf(p.key, of) == part {
			keys++
		}
		return true
	})
	c.results.Ascend(func(k kept) bool {
		if partOf(k.id, of) == part {
			ids++
		}
		return true
	})
	bw := bufio.NewWriter(w)
	var buf []byte
	buf = append(buf, snapshotVersion)
	buf = binary.AppendUvarint(buf, c.applied)
	buf = binary.AppendUvarint(buf, uint64(part))
	buf = binary.AppendUvarint(buf, uint64(of))
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
	buf = binary.AppendUvarint(buf[:0], ids)
	bw.Write(buf)
	c.results.Ascend(func(k kept) bool {
		if partOf(k.id, of) == part {
			buf = appendField(buf[:0], []byte(k.id))
			buf = binary.AppendUvarint(buf, k.res.index)
			ok := byte(0)
			if k.res.ok {
				ok = 1
			}
			buf = append(buf, ok)
			bw.Write(buf)
		}
		return true
	})
	return bw.Flush()
}

// Release does nothing: the clones go with the checkpoint.
func (c *checkpoint) Release() {}

// restore replaces the whole state with the one the parts describe (all
// parts of one snapshot, in order). On error the state is unchanged.
func (s *state) restore(parts []io.Reader) error {
	data := btree.NewG(btreeDegree, pairLess)
	results := btree.NewG(btreeDegree, keptLess)
	var order []entry
	var applied uint64
	for i, p := range parts {
		a, err := readPart(bufio.NewReader(p), i, len(parts), data, results, &order)
		if err != nil {
			return fmt.Errorf("%w: part %d of %d: %w", errBadSnapshot, i, len(parts), err)
		}
		if i > 0 && a != applied {
			return fmt.Errorf("%w: part %d is at index %d, part 0 at %d", errBadSnapshot, i, a, applied)
		}
		applied = a
	}
	slices.SortFunc(order, func(a, b entry) int { return cmp.Compare(a.index, b.index) })
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.data, s.mu.results, s.mu.applied = data, results, applied
	s.mu.order = fifo{items: order}
	for s.mu.order.len() > s.window {
		s.mu.results.Delete(kept{id: s.mu.order.pop().id})
	}
	return nil
}

// readPart decodes part i of of into data, results and order and returns
// its applied index.
func readPart(r *bufio.Reader, i, of int, data *btree.BTreeG[pair], results *btree.BTreeG[kept], order *[]entry) (uint64, error) {
	v, err := r.ReadByte()
	if err != nil {
		return 0, unexpected(err)
	}
	if v != snapshotVersion {
		return 0, fmt.Errorf("version %d", v)
	}
	var hdr [4]uint64 // applied, part, of, keys
	for k := range hdr {
		if hdr[k], err = binary.ReadUvarint(r); err != nil {
			return 0, unexpected(err)
		}
	}
	if hdr[1] != uint64(i) || hdr[2] != uint64(of) {
		return 0, fmt.Errorf("it says it is part %d of %d", hdr[1], hdr[2])
	}
	for range hdr[3] {
		k, err := readField(r, MaxKeyBytes)
		if err != nil {
			return 0, fmt.Errorf("key: %w", err)
		}
		val, err := readField(r, maxSnapshotValue)
		if err != nil {
			return 0, fmt.Errorf("value: %w", err)
		}
		if len(k) == 0 || data.Has(pair{key: string(k)}) {
			return 0, fmt.Errorf("key %q empty or in two parts", k)
		}
		data.ReplaceOrInsert(pair{key: string(k), value: val})
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, unexpected(err)
	}
	for range n {
		id, err := readField(r, MaxRequestIDBytes)
		if err != nil {
			return 0, fmt.Errorf("request id: %w", err)
		}
		index, err := binary.ReadUvarint(r)
		if err != nil {
			return 0, unexpected(err)
		}
		ok, err := r.ReadByte()
		if err != nil {
			return 0, unexpected(err)
		}
		if len(id) == 0 || ok > 1 || index == 0 || index > hdr[0] || results.Has(kept{id: string(id)}) {
			return 0, fmt.Errorf("result of %q: bad or repeated", id)
		}
		results.ReplaceOrInsert(kept{id: string(id), res: result{index: index, ok: ok == 1}})
		*order = append(*order, entry{index: index, id: string(id)})
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return 0, errors.New("data after the part")
	}
	return hdr[0], nil
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
