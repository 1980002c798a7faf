package ordering

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    Record
	}{
		{"data", Record{Kind: KindData, Seq: 1, TS: 11, Frontier: 7, Payload: []byte("a")}},
		{"data without payload", Record{Kind: KindData, Seq: 2, TS: 12}},
		{"data at the payload limit", Record{Kind: KindData, Seq: 3, TS: 13, Payload: bytes.Repeat([]byte{0xff}, 64)}},
		{"data with extreme fields", Record{Kind: KindData, Seq: math.MaxUint64, TS: math.MaxUint64, Frontier: math.MaxUint64, Payload: []byte{0}}},
		{"beacon", Record{Kind: KindBeacon, Seq: 4, TS: 40, Frontier: 30}},
		{"beacon before any message", Record{Kind: KindBeacon, Seq: 0, TS: 12}},
		{"up", Record{Kind: KindUp, TS: 25}},
		{"down", Record{Kind: KindDown, TS: 25}},
		{"publish", Record{Kind: KindPublish, Seq: 5, TS: 50, Topic: 3, Payload: []byte("on topic 3")}},
		{"publish without payload", Record{Kind: KindPublish, Seq: 1, TS: 51, Topic: math.MaxUint32}},
		{"topic beacon", Record{Kind: KindTopicBeacon, Seq: 6, TS: 60, Frontier: 55, Bounds: []TopicSeq{{1, 4}, {7, 1}, {math.MaxUint32, math.MaxUint64}}}},
		{"topic beacon without bounds", Record{Kind: KindTopicBeacon, Seq: 0, TS: 61}},
		{"want", Record{Kind: KindWant, Seq: 7, TS: 70, Frontier: 65}},
		{"want before any message", Record{Kind: KindWant, Seq: 0, TS: 71}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix")
			enc := AppendRecord(append([]byte(nil), prefix...), &tt.r)
			if !bytes.HasPrefix(enc, prefix) {
				t.Fatalf("AppendRecord overwrote dst: %x", enc)
			}
			frame := enc[len(prefix):]
			if want := tt.r.Size(); len(frame) != want {
				t.Fatalf("encoded %d bytes, want %d", len(frame), want)
			}
			got, err := DecodeRecord(frame, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tt.r.Kind || got.Seq != tt.r.Seq || got.TS != tt.r.TS || got.Frontier != tt.r.Frontier || got.Topic != tt.r.Topic ||
				!slices.Equal(got.Bounds, tt.r.Bounds) || !bytes.Equal(got.Payload, tt.r.Payload) {
				t.Fatalf("decoded %+v, want %+v", got, tt.r)
			}
			if again := AppendRecord(nil, &got); !bytes.Equal(again, frame) {
				t.Fatalf("re-encoded %x, want %x", again, frame)
			}
		})
	}
}

func TestRecordEncoding(t *testing.T) {
	r := Record{Kind: KindData, Seq: 0x0102030405060708, TS: 0x1112131415161718, Frontier: 0x2122232425262728, Payload: []byte("xy")}
	want := []byte{
		1,
		1, 2, 3, 4, 5, 6, 7, 8,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
		0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
		'x', 'y',
	}
	if got := AppendRecord(nil, &r); !bytes.Equal(got, want) {
		t.Fatalf("AppendRecord = %x, want %x", got, want)
	}
}

// TestDecodeRecordAliases: the payload of a decoded record is the frame's
// own bytes, not a copy.
func TestDecodeRecordAliases(t *testing.T) {
	frame := AppendRecord(nil, &Record{Kind: KindData, Seq: 1, TS: 1, Payload: []byte("abc")})
	r, err := DecodeRecord(frame, 16)
	if err != nil {
		t.Fatal(err)
	}
	frame[RecordHeaderBytes] = 'z'
	if string(r.Payload) != "zbc" {
		t.Fatalf("payload %q does not alias the frame", r.Payload)
	}
}

// bounds appends the encoding of topic beacon bounds to a header.
func bounds(b []byte, bs ...TopicSeq) []byte {
	r := Record{Kind: KindTopicBeacon, Bounds: bs}
	return append(b, AppendRecord(nil, &r)[RecordHeaderBytes:]...)
}

func TestDecodeRecordRejects(t *testing.T) {
	// header is a record's first RecordHeaderBytes, without what the
	// topic kinds add.
	header := func(kind Kind, seq uint64) []byte {
		return AppendRecord(nil, &Record{Kind: kind, Seq: seq, TS: 5, Frontier: 3})[:RecordHeaderBytes]
	}
	withPayload := func(b []byte, n int) []byte {
		return append(b, bytes.Repeat([]byte{'p'}, n)...)
	}
	tests := []struct {
		name  string
		frame []byte
		max   int
		msg   string // in the error
	}{
		{"empty", nil, 64, "0 bytes"},
		{"short", header(KindBeacon, 1)[:RecordHeaderBytes-1], 64, "24 bytes"},
		{"kind zero", header(0, 1), 64, "unknown kind 0"},
		{"unknown kind", header(8, 1), 64, "unknown kind 8"},
		{"unknown kind 255", header(255, 1), 64, "unknown kind 255"},
		{"data with sequence 0", withPayload(header(KindData, 0), 1), 64, "sequence 0"},
		{"payload on beacon", withPayload(header(KindBeacon, 1), 1), 64, "beacon record with 1 payload bytes"},
		{"payload on up", withPayload(header(KindUp, 0), 2), 64, "up record with 2 payload bytes"},
		{"payload on down", withPayload(header(KindDown, 0), 3), 64, "down record with 3 payload bytes"},
		{"payload on want", withPayload(header(KindWant, 0), 4), 64, "want record with 4 payload bytes"},
		{"payload over the limit", withPayload(header(KindData, 1), 65), 64, "65-byte payload exceeds 64"},
		{"any payload with limit 0", withPayload(header(KindData, 1), 1), 0, "1-byte payload exceeds 0"},
		{"publish without topic", withPayload(header(KindPublish, 1), 3), 64, "without its topic"},
		{"publish topic 0", append(header(KindPublish, 1), 0, 0, 0, 0), 64, "on topic 0"},
		{"publish with sequence 0", append(header(KindPublish, 0), 0, 0, 0, 1), 64, "sequence 0"},
		{"publish over the limit", withPayload(append(header(KindPublish, 1), 0, 0, 0, 1), 65), 64, "65-byte payload exceeds 64"},
		{"topic beacon with a partial bound", withPayload(header(KindTopicBeacon, 1), 11), 64, "not a multiple of 12"},
		{"topic beacon bound on topic 0", bounds(header(KindTopicBeacon, 1), TopicSeq{0, 1}), 64, "on topic 0"},
		{"topic beacon bound 0", bounds(header(KindTopicBeacon, 1), TopicSeq{2, 0}), 64, "bound 0 on topic 2"},
		{"topic beacon bounds out of order", bounds(header(KindTopicBeacon, 1), TopicSeq{2, 1}, TopicSeq{1, 1}), 64, "not increasing"},
		{"topic beacon bound twice", bounds(header(KindTopicBeacon, 1), TopicSeq{2, 1}, TopicSeq{2, 3}), 64, "not increasing"},
		{"topic beacon with too many bounds", append(header(KindTopicBeacon, 1), make([]byte, boundBytes*(MaxTopics+1))...), 64, "at most 65536 topics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRecord(tt.frame, tt.max)
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("got %+v, %v; want an error wrapping ErrBadRecord", r, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindData: "data", KindBeacon: "beacon", KindUp: "up", KindDown: "down", KindPublish: "publish", KindTopicBeacon: "topic-beacon", KindWant: "want", 0: "Kind(0)", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// fuzzMaxPayload is small so that the fuzzer reaches the limit.
const fuzzMaxPayload = 32

// FuzzDecodeRecord: DecodeRecord never panics on any frame; what it
// accepts is a known kind with a payload only on data and publish
// records, within the limit, a topic only on publish records, bounds
// only on topic beacons, and re-encodes to exactly the frame; what it
// rejects wraps ErrBadRecord.
// The seed corpus is in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := DecodeRecord(frame, fuzzMaxPayload)
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		if r.Kind != KindPublish && r.Topic != 0 || r.Kind != KindTopicBeacon && r.Bounds != nil {
			t.Fatalf("accepted %v record with topic %d and bounds %v", r.Kind, r.Topic, r.Bounds)
		}
		switch r.Kind {
		case KindData:
			if r.Seq == 0 {
				t.Fatalf("accepted data record with sequence 0")
			}
			if len(r.Payload) > fuzzMaxPayload {
				t.Fatalf("accepted %d-byte payload, limit %d", len(r.Payload), fuzzMaxPayload)
			}
		case KindPublish:
			if r.Seq == 0 || r.Topic == 0 {
				t.Fatalf("accepted publish record with sequence %d on topic %d", r.Seq, r.Topic)
			}
			if len(r.Payload) > fuzzMaxPayload {
				t.Fatalf("accepted %d-byte payload, limit %d", len(r.Payload), fuzzMaxPayload)
			}
		case KindTopicBeacon:
			if len(r.Payload) != 0 {
				t.Fatalf("accepted %v record with %d payload bytes", r.Kind, len(r.Payload))
			}
			for i, b := range r.Bounds {
				if b.Topic == 0 || b.Seq == 0 || i > 0 && b.Topic <= r.Bounds[i-1].Topic {
					t.Fatalf("accepted bounds %v", r.Bounds)
				}
			}
		case KindBeacon, KindUp, KindDown, KindWant:
			if len(r.Payload) != 0 {
				t.Fatalf("accepted %v record with %d payload bytes", r.Kind, len(r.Payload))
			}
		default:
			t.Fatalf("accepted unknown kind %d", r.Kind)
		}
		if again := AppendRecord(nil, &r); !bytes.Equal(again, frame) {
			t.Fatalf("re-encoded %x, frame %x", again, frame)
		}
	})
}
