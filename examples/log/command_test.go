package sharedlog

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

// Commands, as tests write them.
func appendCmd(id, data string, streams ...string) []byte {
	return (&command{kind: kindAppend, id: id, data: []byte(data), streams: streams}).encode()
}

func trimCmd(id string, before uint64) []byte {
	return (&command{kind: kindTrim, id: id, before: before}).encode()
}

func barrierCmd(id string) []byte { return (&command{kind: kindBarrier, id: id}).encode() }

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []command{
		{kind: kindAppend, id: "k", data: []byte{}},
		{kind: kindAppend, id: "0123456789abcdef-7", data: []byte("hello"), streams: []string{"a", "b.c", "x:y_z-1"}},
		{kind: kindAppend, id: strings.Repeat("i", MaxRequestID), data: bytes.Repeat([]byte{0}, 1000),
			streams: []string{strings.Repeat("s", MaxStreamName)}},
		{kind: kindTrim, id: "t", before: 0},
		{kind: kindTrim, id: "t", before: 1<<64 - 1},
		{kind: kindBarrier, id: "b"},
	} {
		got, err := decodeCommand(c.encode())
		if err != nil {
			t.Fatalf("%v %q: %v", c.kind, c.id, err)
		}
		if !sameCommand(got, c) {
			t.Errorf("decoded %+v, want %+v", got, c)
		}
	}
}

func sameCommand(a, b command) bool {
	return a.kind == b.kind && a.id == b.id && a.before == b.before && bytes.Equal(a.data, b.data) && slices.Equal(a.streams, b.streams)
}

// TestDecodeCommandRejects: every malformed command is an error wrapping
// errMalformed, never a panic.
func TestDecodeCommandRejects(t *testing.T) {
	good := appendCmd("id", "data", "s")
	manyStreams := make([]string, MaxStreams+1)
	for i := range manyStreams {
		manyStreams[i] = string(rune('a' + i))
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"version only", []byte{commandVersion}},
		{"unknown version", append([]byte{2}, good[1:]...)},
		{"unknown kind", []byte{commandVersion, 9, 1, 'x'}},
		{"kind zero", []byte{commandVersion, 0, 1, 'x'}},
		{"empty request id", []byte{commandVersion, byte(kindBarrier), 0}},
		{"request id too long", barrierCmd(strings.Repeat("i", MaxRequestID+1))},
		{"request id beyond the payload", []byte{commandVersion, byte(kindBarrier), 5, 'x'}},
		{"truncated append", good[:len(good)-1]},
		{"trailing byte", append(slices.Clone(good), 0)},
		{"bad varint", []byte{commandVersion, byte(kindTrim), 1, 'x', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"trim without position", []byte{commandVersion, byte(kindTrim), 1, 'x'}},
		{"too many streams", appendCmd("id", "d", manyStreams...)},
		{"empty stream name", appendCmd("id", "d", "")},
		{"stream name too long", appendCmd("id", "d", strings.Repeat("s", MaxStreamName+1))},
		{"stream name with a slash", appendCmd("id", "d", "a/b")},
		{"stream named twice", appendCmd("id", "d", "a", "a")},
		{"data length beyond the payload", []byte{commandVersion, byte(kindAppend), 1, 'x', 0, 9, 'd'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, err := decodeCommand(tc.payload); !errors.Is(err, errMalformed) {
				t.Fatalf("decoded %+v, %v; want errMalformed", c, err)
			}
		})
	}
}

// FuzzDecodeCommand: decoding never panics, and what decodes encodes
// back to a command that decodes the same.
func FuzzDecodeCommand(f *testing.F) {
	for _, p := range [][]byte{
		appendCmd("0123456789abcdef-1", "hello", "a", "b"),
		appendCmd("k", ""),
		trimCmd("t", 42),
		barrierCmd("b"),
		{commandVersion, byte(kindAppend), 1, 'x', 17},
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := decodeCommand(p)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		again, err := decodeCommand(c.encode())
		if err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", c, err)
		}
		if !sameCommand(again, c) {
			t.Fatalf("round trip: %+v became %+v", c, again)
		}
		if c.key() == "" || len(c.streams) > MaxStreams || len(c.id) > MaxRequestID {
			t.Fatalf("decoded a command beyond the limits: %+v", c)
		}
	})
}
