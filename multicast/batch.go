package multicast

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A batch frame carries, in send order, one record per message the root
// sent: small messages inline, large messages as a placeholder with their
// size (their blocks travel over the large-message channel). Receivers use
// the placeholders to merge both channels into the one send order.
//
//	batch  = seq:u64 count:u32 record*count
//	record = kind:u8 (0 small, 1 large) length:u32 [data:length if small]
//
// seq is the send-order index of the batch's first record. All integers are
// big-endian.
const (
	batchHeaderBytes    = 12
	batchRecordOverhead = 5

	recordSmall byte = 0
	recordLarge byte = 1
)

// errBadBatch is wrapped by every batch decoding error.
var errBadBatch = errors.New("malformed batch")

// batchRecord is one decoded record; for small records data aliases the
// frame.
type batchRecord struct {
	large bool
	size  int
	data  []byte
}

// batchWriter appends records to a batch buffer.
type batchWriter struct {
	buf   []byte // full capacity buffer; buf[:n] is written
	n     int
	count int
}

func (w *batchWriter) reset(buf []byte, seq uint64) {
	w.buf = buf
	binary.BigEndian.PutUint64(buf[0:8], seq)
	w.n = batchHeaderBytes
	w.count = 0
}

// fits reports whether a record with dataLen inline bytes still fits.
func (w *batchWriter) fits(dataLen int) bool {
	return w.n+batchRecordOverhead+dataLen <= len(w.buf)
}

func (w *batchWriter) appendSmall(data []byte) {
	w.buf[w.n] = recordSmall
	binary.BigEndian.PutUint32(w.buf[w.n+1:], uint32(len(data)))
	w.n += batchRecordOverhead
	w.n += copy(w.buf[w.n:], data)
	w.count++
}

func (w *batchWriter) appendLarge(size int) {
	w.buf[w.n] = recordLarge
	binary.BigEndian.PutUint32(w.buf[w.n+1:], uint32(size))
	w.n += batchRecordOverhead
	w.count++
}

// bytes finishes the header and returns the encoded batch.
func (w *batchWriter) bytes() []byte {
	binary.BigEndian.PutUint32(w.buf[8:12], uint32(w.count))
	return w.buf[:w.n]
}

// decodeBatch parses a batch frame received from the network, calling fn
// for each record in order. It checks every length against the frame and
// the limits before using it: maxSmall bounds an inline record, maxLarge a
// large message's announced size. It returns the batch's sequence number.
// If fn returns an error, decoding stops and that error is returned.
func decodeBatch(frame []byte, maxSmall, maxLarge int, fn func(batchRecord) error) (uint64, error) {
	if len(frame) < batchHeaderBytes {
		return 0, fmt.Errorf("%w: %d bytes is shorter than the header", errBadBatch, len(frame))
	}
	seq := binary.BigEndian.Uint64(frame[0:8])
	count := binary.BigEndian.Uint32(frame[8:12])
	// Every record takes at least batchRecordOverhead bytes, which bounds
	// count before any loop runs on it.
	if uint64(count)*batchRecordOverhead > uint64(len(frame)-batchHeaderBytes) {
		return seq, fmt.Errorf("%w: %d records cannot fit in %d bytes", errBadBatch, count, len(frame))
	}
	p := frame[batchHeaderBytes:]
	for i := uint32(0); i < count; i++ {
		if len(p) < batchRecordOverhead {
			return seq, fmt.Errorf("%w: record %d truncated", errBadBatch, i)
		}
		kind, length := p[0], binary.BigEndian.Uint32(p[1:5])
		p = p[batchRecordOverhead:]
		var rec batchRecord
		switch kind {
		case recordSmall:
			if uint64(length) > uint64(maxSmall) {
				return seq, fmt.Errorf("%w: record %d: small message of %d bytes exceeds %d", errBadBatch, i, length, maxSmall)
			}
			if uint64(length) > uint64(len(p)) {
				return seq, fmt.Errorf("%w: record %d: %d bytes announced, %d left", errBadBatch, i, length, len(p))
			}
			rec = batchRecord{size: int(length), data: p[:length:length]}
			p = p[length:]
		case recordLarge:
			if uint64(length) > uint64(maxLarge) {
				return seq, fmt.Errorf("%w: record %d: message of %d bytes exceeds %d", errBadBatch, i, length, maxLarge)
			}
			rec = batchRecord{large: true, size: int(length)}
		default:
			return seq, fmt.Errorf("%w: record %d: unknown kind %d", errBadBatch, i, kind)
		}
		if err := fn(rec); err != nil {
			return seq, err
		}
	}
	if len(p) != 0 {
		return seq, fmt.Errorf("%w: %d trailing bytes", errBadBatch, len(p))
	}
	return seq, nil
}
