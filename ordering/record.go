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
	// KindPublish is an application message on a topic (Topic), in the
	// sender's channel for that topic: Seq numbers the sender's messages
	// on the topic. It is its sender's beacon (Seq, TS+1) for that
	// channel only.
	KindPublish Kind = 5
	// KindTopicBeacon is a promise over every channel of its sender, in
	// a group with topics: after its group message Seq and, for every
	// topic, its message on that topic that Bounds (with the sender's
	// earlier topic beacons) names, nothing of the sender is stamped
	// below TS. Bounds lists only the topics whose count changed since
	// the sender's previous topic beacon.
	KindTopicBeacon Kind = 6
	// KindWant asks the group to move its barriers past TS soon: its
	// sender waits for them (a linearizable read, see Core.Want). Every
	// member that receives it beacons and announces its frontier as it
	// would for a message stamped TS, instead of at the idle pace. It
	// promises nothing; like a beacon, it follows the sender's message
	// Seq and carries its frontier in the direct commit scheme.
	KindWant Kind = 7
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
	case KindPublish:
		return "publish"
	case KindTopicBeacon:
		return "topic-beacon"
	case KindWant:
		return "want"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Record is one protocol record between members. Data and beacons are
// multicast in the sender's own group, in its send order; a publish
// record in the sender's group for its topic; up and down records go to
// one member of the aggregation tree.
type Record struct {
	Kind Kind
	// Seq is the sender's message sequence number (data: this message;
	// beacon: the last message sent before the promise; publish: this
	// message among the sender's on its topic). It starts at 1.
	Seq uint64
	// TS is the message stamp (data), the promise (beacon), the
	// frontier or barrier (up, down), or the stamp the sender waits for
	// the barriers to pass (want).
	TS Timestamp
	// Frontier is the sender's receive frontier when it sent the record,
	// on data, beacons and wants in the direct commit scheme; zero
	// otherwise.
	Frontier Timestamp
	// Topic is the topic of a publish record (from 1); zero otherwise.
	Topic uint32
	// Bounds are the topic counts a topic beacon is bound to, by
	// increasing topic (see KindTopicBeacon); nil otherwise.
	Bounds []TopicSeq
	// Payload is the application message (data and publish only).
	Payload []byte
}

// TopicSeq is a sender's count of messages on one topic.
type TopicSeq struct {
	Topic uint32
	Seq   uint64
}

// RecordHeaderBytes is the encoded size of a record without its payload
// (and without the topic of a publish record or the bounds of a topic
// beacon: see Size).
const RecordHeaderBytes = 25

// Sizes of the parts that follow the header of the topic kinds.
const (
	topicBytes = 4  // a publish record's topic
	boundBytes = 12 // one bound of a topic beacon: topic u32, seq u64
)

// Size returns the encoded size of r.
func (r *Record) Size() int {
	n := RecordHeaderBytes + len(r.Payload)
	switch r.Kind {
	case KindPublish:
		n += topicBytes
	case KindTopicBeacon:
		n += boundBytes * len(r.Bounds)
	}
	return n
}

// ErrBadRecord is wrapped by every decoding error.
var ErrBadRecord = errors.New("ordering: malformed record")

// AppendRecord appends the encoding of r to dst:
//
//	kind:u8 seq:u64 ts:u64 frontier:u64 payload            (data)
//	kind:u8 seq:u64 ts:u64 frontier:u64 topic:u32 payload  (publish)
//	kind:u8 seq:u64 ts:u64 frontier:u64 (topic:u32 seq:u64)*  (topic beacon)
//	kind:u8 seq:u64 ts:u64 frontier:u64                    (the others)
//
// big-endian; the payload, or the bounds, run to the end of the frame.
func AppendRecord(dst []byte, r *Record) []byte {
	dst = append(dst, byte(r.Kind))
	dst = binary.BigEndian.AppendUint64(dst, r.Seq)
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.TS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(r.Frontier))
	switch r.Kind {
	case KindPublish:
		dst = binary.BigEndian.AppendUint32(dst, r.Topic)
	case KindTopicBeacon:
		for _, b := range r.Bounds {
			dst = binary.BigEndian.AppendUint32(dst, b.Topic)
			dst = binary.BigEndian.AppendUint64(dst, b.Seq)
		}
	}
	return append(dst, r.Payload...)
}

// DecodeRecord parses a record received from the network. The payload
// aliases frame. Only data and publish records may carry a payload, of
// at most maxPayload bytes; sequence numbers start at 1, topics at 1,
// and a topic beacon's bounds, at most MaxTopics, name topics in
// increasing order, each with a count of at least 1. Whether a topic
// exists is for the core to check.
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
	case KindPublish:
		if r.Seq == 0 {
			return Record{}, fmt.Errorf("%w: publish record with sequence 0", ErrBadRecord)
		}
		if len(payload) < topicBytes {
			return Record{}, fmt.Errorf("%w: publish record of %d bytes without its topic", ErrBadRecord, len(frame))
		}
		r.Topic = binary.BigEndian.Uint32(payload)
		if r.Topic == 0 {
			return Record{}, fmt.Errorf("%w: publish record on topic 0", ErrBadRecord)
		}
		payload = payload[topicBytes:]
		if len(payload) > maxPayload {
			return Record{}, fmt.Errorf("%w: %d-byte payload exceeds %d", ErrBadRecord, len(payload), maxPayload)
		}
		r.Payload = payload
	case KindTopicBeacon:
		if len(payload)%boundBytes != 0 {
			return Record{}, fmt.Errorf("%w: topic beacon with %d bytes of bounds, not a multiple of %d", ErrBadRecord, len(payload), boundBytes)
		}
		switch n := len(payload) / boundBytes; {
		case n > MaxTopics:
			return Record{}, fmt.Errorf("%w: topic beacon with %d bounds, at most %d topics", ErrBadRecord, n, MaxTopics)
		case n > 0:
			r.Bounds = make([]TopicSeq, n)
		}
		for i := range r.Bounds {
			b := payload[i*boundBytes:]
			r.Bounds[i] = TopicSeq{Topic: binary.BigEndian.Uint32(b), Seq: binary.BigEndian.Uint64(b[4:])}
			switch {
			case r.Bounds[i].Topic == 0:
				return Record{}, fmt.Errorf("%w: topic beacon bound on topic 0", ErrBadRecord)
			case i > 0 && r.Bounds[i].Topic <= r.Bounds[i-1].Topic:
				return Record{}, fmt.Errorf("%w: topic beacon bounds on topics %d then %d, not increasing", ErrBadRecord, r.Bounds[i-1].Topic, r.Bounds[i].Topic)
			case r.Bounds[i].Seq == 0:
				return Record{}, fmt.Errorf("%w: topic beacon bound 0 on topic %d", ErrBadRecord, r.Bounds[i].Topic)
			}
		}
	case KindBeacon, KindUp, KindDown, KindWant:
		if len(payload) != 0 {
			return Record{}, fmt.Errorf("%w: %v record with %d payload bytes", ErrBadRecord, r.Kind, len(payload))
		}
	default:
		return Record{}, fmt.Errorf("%w: unknown kind %d", ErrBadRecord, frame[0])
	}
	return r, nil
}
