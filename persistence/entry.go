package persistence

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/convoy-gcs/convoy/membership/record"
)

// Entry is one delivered message in the log.
type Entry struct {
	// Index is the global delivery index: every member delivers the same
	// sequence, so every member agrees on it.
	Index uint64
	// Epoch is the view the message was delivered in.
	Epoch uint64
	// Sender is the membership ID of the message's sender.
	Sender uint64
	// Seq is the sender's sequence number of the message.
	Seq uint64
	// Payload is the message itself. Entries returned by Get and Scan own
	// their payload.
	Payload []byte
}

// Key prefixes. Keys are a prefix byte then a big-endian uint64, so keys
// of one kind sort by number.
const (
	prefixEntry = 'e'
	prefixView  = 'v'
	prefixMeta  = 'm'
	// prefixMark holds the durable mark (metaDurable), rewritten while
	// entries are appended: it sorts before the entries, so that each new
	// entry is still the memtable's largest key (much cheaper to insert).
	prefixMark = 'd'
	// prefixChunk holds the chunks of snapshots, under longer keys (see
	// chunkKey). It sorts before the entries too.
	prefixChunk = 'c'
)

// Metadata keys (under prefixMeta).
const (
	// metaTrim holds the trim point: every entry below it was deleted.
	metaTrim = 1
	// metaSnapshot holds the last snapshot index and its metadata.
	metaSnapshot = 2
	// metaDurable holds the durable mark (see Log.SetDurable).
	metaDurable = 3
	// metaSnapshotParts holds the manifest of the snapshot's parts, with
	// their chunks' generation; absent for a snapshot without parts.
	metaSnapshotParts = 4
)

const (
	keyLen = 1 + 8
	// formatV1 is the only record format so far; it follows the checksum.
	formatV1 = 1
	// headerLen is the checksum and the format byte.
	headerLen = 4 + 1
	// entryFixedLen is the header, epoch, sender and seq.
	entryFixedLen = headerLen + 3*8
	// maxRecordLen bounds any record read from disk.
	maxRecordLen = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func makeKey(prefix byte, n uint64) []byte {
	k := make([]byte, keyLen)
	k[0] = prefix
	binary.BigEndian.PutUint64(k[1:], n)
	return k
}

// parseKey returns the number in key k of the given prefix.
func parseKey(prefix byte, k []byte) (uint64, bool) {
	if len(k) != keyLen || k[0] != prefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// checksum is the CRC-32C over the key and the value after the checksum.
func checksum(key, rest []byte) uint32 {
	c := crc32.Update(0, castagnoli, key)
	return crc32.Update(c, castagnoli, rest)
}

// seal fills in the header of value v (already holding its body) for key k.
func seal(k, v []byte) {
	v[4] = formatV1
	binary.BigEndian.PutUint32(v[:4], checksum(k, v[4:]))
}

// open checks the header of value v stored under key k and returns its
// body (after the format byte).
func open(k, v []byte) ([]byte, error) {
	if len(v) < headerLen || len(v) > maxRecordLen {
		return nil, fmt.Errorf("record length %d", len(v))
	}
	if got, want := binary.BigEndian.Uint32(v[:4]), checksum(k, v[4:]); got != want {
		return nil, fmt.Errorf("checksum %08x, want %08x", got, want)
	}
	if v[4] != formatV1 {
		return nil, fmt.Errorf("unknown record format %d", v[4])
	}
	return v[headerLen:], nil
}

// encodeEntry returns the key and value of e.
func encodeEntry(e *Entry) (key, value []byte) {
	key, value = make([]byte, keyLen), make([]byte, entryValueLen(e))
	putEntry(key, value, e)
	return key, value
}

// entryValueLen is the length of e's value.
func entryValueLen(e *Entry) int { return entryFixedLen + len(e.Payload) }

// entrySize is the bytes e takes in a batch, key and value: what the
// log counts against its queue bounds.
func entrySize(e *Entry) int { return keyLen + entryValueLen(e) }

// putEntry writes the key and value of e into key and value, of keyLen
// and entryValueLen(e) bytes, every byte of them.
func putEntry(key, value []byte, e *Entry) {
	key[0] = prefixEntry
	binary.BigEndian.PutUint64(key[1:], e.Index)
	binary.BigEndian.PutUint64(value[headerLen:], e.Epoch)
	binary.BigEndian.PutUint64(value[headerLen+8:], e.Sender)
	binary.BigEndian.PutUint64(value[headerLen+16:], e.Seq)
	copy(value[entryFixedLen:], e.Payload)
	seal(key, value)
}

// decodeEntry decodes and verifies an entry record. The returned entry
// does not alias value. Errors are not wrapped in ErrCorrupt; callers add
// that and the index.
func decodeEntry(key, value []byte) (Entry, error) {
	index, ok := parseKey(prefixEntry, key)
	if !ok {
		return Entry{}, fmt.Errorf("malformed entry key %x", key)
	}
	body, err := open(key, value)
	if err != nil {
		return Entry{}, err
	}
	if len(body) < entryFixedLen-headerLen {
		return Entry{}, fmt.Errorf("entry record length %d", len(value))
	}
	e := Entry{
		Index:  index,
		Epoch:  binary.BigEndian.Uint64(body),
		Sender: binary.BigEndian.Uint64(body[8:]),
		Seq:    binary.BigEndian.Uint64(body[16:]),
	}
	if p := body[24:]; len(p) > 0 {
		e.Payload = append([]byte(nil), p...)
	}
	return e, nil
}

// encodeView returns the key and value of view record v.
func encodeView(v *record.View) (key, value []byte, err error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding view %d: %w", v.Epoch, err)
	}
	key = makeKey(prefixView, v.Epoch)
	value = make([]byte, headerLen+len(j))
	copy(value[headerLen:], j)
	seal(key, value)
	return key, value, nil
}

// decodeView decodes and verifies a view record.
func decodeView(key, value []byte) (record.View, error) {
	epoch, ok := parseKey(prefixView, key)
	if !ok {
		return record.View{}, fmt.Errorf("malformed view key %x", key)
	}
	body, err := open(key, value)
	if err != nil {
		return record.View{}, err
	}
	var v record.View
	if err := json.Unmarshal(body, &v); err != nil {
		return record.View{}, fmt.Errorf("view %d: %w", epoch, err)
	}
	if v.Epoch != epoch {
		return record.View{}, fmt.Errorf("view record for epoch %d holds epoch %d", epoch, v.Epoch)
	}
	return v, nil
}

// encodeMeta returns the key and value of metadata record id holding n
// and data.
func encodeMeta(id, n uint64, data []byte) (key, value []byte) {
	return encodeMetaAt(prefixMeta, id, n, data)
}

// encodeMetaAt is encodeMeta under another key prefix.
func encodeMetaAt(prefix byte, id, n uint64, data []byte) (key, value []byte) {
	key = makeKey(prefix, id)
	value = make([]byte, headerLen+8+len(data))
	binary.BigEndian.PutUint64(value[headerLen:], n)
	copy(value[headerLen+8:], data)
	seal(key, value)
	return key, value
}

// decodeMeta decodes and verifies a metadata record. The returned data
// does not alias value.
func decodeMeta(key, value []byte) (n uint64, data []byte, err error) {
	if len(key) == 0 || key[0] != prefixMeta && key[0] != prefixMark {
		return 0, nil, fmt.Errorf("malformed metadata key %x", key)
	}
	if _, ok := parseKey(key[0], key); !ok {
		return 0, nil, fmt.Errorf("malformed metadata key %x", key)
	}
	body, err := open(key, value)
	if err != nil {
		return 0, nil, err
	}
	if len(body) < 8 {
		return 0, nil, fmt.Errorf("metadata record length %d", len(value))
	}
	n = binary.BigEndian.Uint64(body)
	if d := body[8:]; len(d) > 0 {
		data = append([]byte(nil), d...)
	}
	return n, data, nil
}

// encodeManifest returns the key and value of the manifest record of
// snapshot generation gen: a version byte, then as uvarints the
// snapshot's index, the number of parts and, for each part, its stream,
// size and number of chunks.
func encodeManifest(gen uint64, m *manifest) (key, value []byte) {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(m.parts)*3*binary.MaxVarintLen64)
	b = append(b, manifestVersion)
	b = binary.AppendUvarint(b, m.index)
	b = binary.AppendUvarint(b, uint64(len(m.parts)))
	for _, p := range m.parts {
		b = binary.AppendUvarint(b, uint64(p.stream))
		b = binary.AppendUvarint(b, p.size)
		b = binary.AppendUvarint(b, uint64(p.chunks))
	}
	return encodeMeta(metaSnapshotParts, gen, b)
}

// decodeManifest decodes and verifies a manifest record. It accepts only
// what encodeManifest produces from a consistent manifest: every part's
// size fits its chunks, each of 1 to SnapshotChunkBytes bytes.
func decodeManifest(key, value []byte) (gen uint64, m manifest, err error) {
	if id, ok := parseKey(prefixMeta, key); !ok || id != metaSnapshotParts {
		return 0, manifest{}, fmt.Errorf("malformed manifest key %x", key)
	}
	gen, b, err := decodeMeta(key, value)
	if err != nil {
		return 0, manifest{}, err
	}
	if gen == 0 {
		return 0, manifest{}, errors.New("manifest of generation 0")
	}
	if len(b) == 0 || b[0] != manifestVersion {
		return 0, manifest{}, errors.New("unknown manifest version")
	}
	b = b[1:]
	var n uint64
	if m.index, b, err = uvarint(b); err != nil {
		return 0, manifest{}, fmt.Errorf("index: %w", err)
	}
	if n, b, err = uvarint(b); err != nil {
		return 0, manifest{}, fmt.Errorf("part count: %w", err)
	}
	if n > MaxSnapshotParts || n > uint64(len(b))/3 {
		return 0, manifest{}, fmt.Errorf("%d parts in %d bytes", n, len(b))
	}
	m.parts = make([]partInfo, n)
	for i := range m.parts {
		var stream, chunks uint64
		p := &m.parts[i]
		if stream, b, err = uvarint(b); err == nil {
			if p.size, b, err = uvarint(b); err == nil {
				chunks, b, err = uvarint(b)
			}
		}
		switch {
		case err != nil:
			return 0, manifest{}, fmt.Errorf("part %d: %w", i, err)
		case stream > maxStreams-1 || chunks > 1<<32-1:
			return 0, manifest{}, fmt.Errorf("part %d: stream %d, %d chunks", i, stream, chunks)
		case p.size < chunks || p.size > chunks*SnapshotChunkBytes:
			return 0, manifest{}, fmt.Errorf("part %d: %d bytes in %d chunks", i, p.size, chunks)
		}
		p.stream, p.chunks = uint32(stream), uint32(chunks)
	}
	if len(b) != 0 {
		return 0, manifest{}, fmt.Errorf("%d bytes after the manifest", len(b))
	}
	return gen, m, nil
}

// uvarint reads a uvarint from b in its shortest encoding, the only one
// AppendUvarint writes.
func uvarint(b []byte) (uint64, []byte, error) {
	v, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, nil, errors.New("truncated or overlong varint")
	}
	if k != len(binary.AppendUvarint(nil, v)) {
		return 0, nil, errors.New("non-minimal varint")
	}
	return v, b[k:], nil
}

// decodeChunk verifies a snapshot chunk record and returns its data,
// which aliases value.
func decodeChunk(key, value []byte) ([]byte, error) {
	if len(key) != chunkKeyLen || key[0] != prefixChunk {
		return nil, fmt.Errorf("malformed chunk key %x", key)
	}
	body, err := open(key, value)
	if err != nil {
		return nil, err
	}
	if len(body) == 0 || len(body) > SnapshotChunkBytes {
		return nil, fmt.Errorf("chunk of %d bytes", len(body))
	}
	return body, nil
}

// parseChunkGen returns the generation in chunk key k.
func parseChunkGen(k []byte) (uint64, bool) {
	if len(k) != chunkKeyLen || k[0] != prefixChunk {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}
