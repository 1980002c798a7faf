package ordering

import (
	"bytes"
	"errors"
	"math"
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix")
			enc := AppendRecord(append([]byte(nil), prefix...), &tt.r)
			if !bytes.HasPrefix(enc, prefix) {
				t.Fatalf("AppendRecord overwrote dst: %x", enc)
			}
			frame := enc[len(prefix):]
			if want := RecordHeaderBytes + len(tt.r.Payload); len(frame) != want {
				t.Fatalf("encoded %d bytes, want %d", len(frame), want)
			}
			got, err := DecodeRecord(frame, 64)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kind != tt.r.Kind || got.Seq != tt.r.Seq || got.TS != tt.r.TS || got.Frontier != tt.r.Frontier || !bytes.Equal(got.Payload, tt.r.Payload) {
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

func TestDecodeRecordRejects(t *testing.T) {
	header := func(kind Kind, seq uint64) []byte {
		return AppendRecord(nil, &Record{Kind: kind, Seq: seq, TS: 5, Frontier: 3})
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
		{"unknown kind", header(5, 1), 64, "unknown kind 5"},
		{"unknown kind 255", header(255, 1), 64, "unknown kind 255"},
		{"data with sequence 0", withPayload(header(KindData, 0), 1), 64, "sequence 0"},
		{"payload on beacon", withPayload(header(KindBeacon, 1), 1), 64, "beacon record with 1 payload bytes"},
		{"payload on up", withPayload(header(KindUp, 0), 2), 64, "up record with 2 payload bytes"},
		{"payload on down", withPayload(header(KindDown, 0), 3), 64, "down record with 3 payload bytes"},
		{"payload over the limit", withPayload(header(KindData, 1), 65), 64, "65-byte payload exceeds 64"},
		{"any payload with limit 0", withPayload(header(KindData, 1), 1), 0, "1-byte payload exceeds 0"},
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
	for k, want := range map[Kind]string{KindData: "data", KindBeacon: "beacon", KindUp: "up", KindDown: "down", 0: "Kind(0)", 9: "Kind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint8(k), got, want)
		}
	}
}

// fuzzMaxPayload is small so that the fuzzer reaches the limit.
const fuzzMaxPayload = 32

// FuzzDecodeRecord: DecodeRecord never panics on any frame; what it
// accepts is a known kind with a payload only on data, within the limit,
// and re-encodes to exactly the frame; what it rejects wraps ErrBadRecord.
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
		switch r.Kind {
		case KindData:
			if r.Seq == 0 {
				t.Fatalf("accepted data record with sequence 0")
			}
			if len(r.Payload) > fuzzMaxPayload {
				t.Fatalf("accepted %d-byte payload, limit %d", len(r.Payload), fuzzMaxPayload)
			}
		case KindBeacon, KindUp, KindDown:
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
