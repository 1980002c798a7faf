package ordering

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says what a record carries.
type Kind uint8

const (
	// KindData is an application message; it is also its sender's beacon
	// (Seq, TS+1).
	KindData Kind = 1
	// KindBeacon is a promise: after message Seq, nothing of the sender is
	// stamped below TS.
	KindBeacon Kind = 2
	// KindUp carries a subtree's minimum frontier (in TS) to the parent in
	// the aggregation tree.
	KindUp Kind = 3
	// KindDown carries the commit barrier (in TS) down the aggregation tree.
	KindDown Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindBeacon:
		return "beacon"
	case KindUp:
		return "up"
	case KindDown:
		return "down"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Record is one protocol record between members. Data and beacons are
// multicast in the sender's own group, in its send order; up and down
// records go to one member of the aggregation tree.
type Record struct {
	Kind Kind
	// Seq is the sender's message sequence number (data: this message;
	// beacon: the last message sent before the promise). It starts at 1.
	Seq uint64
	// TS is the message stamp (data), the promise (beacon), or the
	// frontier or barrier (up, down).
	TS Timestamp
	// Frontier is the sender's receive frontier when it sent the record,
	// on data and beacons in the direct commit scheme; zero otherwise.
	Frontier Timestamp
	// Payload is the application message (data only).
	Payload []byte
}

// RecordHeaderBytes is the encoded size of a record without its payload.
const RecordHeaderBytes = 25

// ErrBadRecord is wrapped by every decoding error.
var ErrBadRecord = errors.New("ordering: malformed record")

// AppendRecord appends the encoding of r to dst:
//
//	kind:u8 seq:u64 ts:u64 frontier:u64 payload
//
// big-endian; the payload runs to the end of the frame.
func AppendRecord(dst []byte, r *Record) []byte {
	dst = append(dst, byte(r.Kind))
	dst = binary.BigEndian.AppendUint64(dst, r.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.TS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Frontier))
	return append(dst, r.Payload...)
}

// DecodeRecord parses a record received from the network. The payload
// aliases frame. Only data records may carry a payload, of at most
// maxPayload bytes, and sequence numbers start at 1.
func DecodeRecord(frame []byte, maxPayload int) (Record, error) {
	if len(frame) < RecordHeaderBytes {
		return Record{}, fmt.Errorf("%w: %d bytes, header is %d", ErrBadRecord, len(frame), RecordHeaderBytes)
	}
	r := Record{
		Kind:     Kind(frame[0]),
		Seq:      binary.BigEndian.Uint64(frame[1:9]),
		TS:       Timestamp(binary.BigEndian.Uint64(frame[9:17])),
		Frontier: Timestamp(binary.BigEndian.Uint64(frame[17:25])),
	}
	payload := frame[RecordHeaderBytes:]
	switch r.Kind {
	case KindData:
		if r.Seq == 0 {
			return Record{}, fmt.Errorf("%w: data record with sequence 0", ErrBadRecord)
		}
		if len(payload) > maxPayload {
			return Record{}, fmt.Errorf("%w: %d-byte payload exceeds %d", ErrBadRecord, len(payload), maxPayload)
		}
		r.Payload = payload
	case KindBeacon, KindUp, KindDown:
		if len(payload) != 0 {
			return Record{}, fmt.Errorf("%w: %v record with %d payload bytes", ErrBadRecord, r.Kind, len(payload))
		}
	default:
		return Record{}, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, frame[0])
	}
	return r, nil
}
