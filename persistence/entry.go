package persistence

import (
	"encoding/binary"
	"encoding/json"
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
)

// Metadata keys (under prefixMeta).
const (
	// metaTrim holds the trim point: every entry below it was deleted.
	metaTrim = 1
	// metaSnapshot holds the last snapshot index and its metadata.
	metaSnapshot = 2
	// metaDurable holds the durable mark (see Log.SetDurable).
	metaDurable = 3
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
	key = makeKey(prefixEntry, e.Index)
	value = make([]byte, entryFixedLen+len(e.Payload))
	binary.BigEndian.PutUint64(value[headerLen:], e.Epoch)
	binary.BigEndian.PutUint64(value[headerLen+8:], e.Sender)
	binary.BigEndian.PutUint64(value[headerLen+16:], e.Seq)
	copy(value[entryFixedLen:], e.Payload)
	seal(key, value)
	return key, value
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
