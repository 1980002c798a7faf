package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{Tag: 1, Op: OpGet, Key: "k"},
		{Tag: 2, Op: OpGetStale, Key: strings.Repeat("k", MaxKeyBytes)},
		{Tag: 3, Op: OpPut, Key: "k", ID: strings.Repeat("i", MaxIDBytes), Value: []byte("v")},
		{Tag: 4, Op: OpPut, Key: "k", ID: "c-1", Value: []byte{}},
		{Tag: 5, Op: OpDelete, Key: "k", ID: "c-2"},
		{Tag: 6, Op: OpCAS, Key: "k", ID: "c-3", Value: []byte("new"), HasOld: true, Old: []byte("old")},
		{Tag: 1<<64 - 1, Op: OpCAS, Key: "k", ID: "c-4", Value: []byte("new")},
		{Tag: 7, Op: OpPut, Key: "k", ID: "c-5", Value: []byte("v"), Issued: 1_700_000_000_123_456_789},
		{Tag: 8, Op: OpDelete, Key: "k", ID: "c-6", Issued: 1},
		{Tag: 9, Op: OpCAS, Key: "k", ID: "c-7", Value: []byte("new"), HasOld: true, Old: []byte("old"), Issued: 1<<63 - 1},
	} {
		b := AppendRequest([]byte("prefix"), &r)
		b = b[len("prefix"):]
		if len(b) != RequestBytes(&r) {
			t.Errorf("%v: frame of %d bytes, RequestBytes says %d", r.Op, len(b), RequestBytes(&r))
		}
		frame, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20, nil)
		if err != nil {
			t.Fatalf("%v: ReadFrame: %v", r.Op, err)
		}
		got, err := DecodeRequest(frame)
		if err != nil {
			t.Fatalf("%v: DecodeRequest: %v", r.Op, err)
		}
		want := r
		if want.Value == nil {
			want.Value = []byte{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round trip: got %+v, want %+v", got, want)
		}
		if tag, ok := Tag(frame); !ok || tag != r.Tag {
			t.Errorf("Tag = %d, %v; want %d", tag, ok, r.Tag)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []Response{
		{Tag: 1, Status: 200, Index: 7, Body: []byte("value")},
		{Tag: 2, Status: 200, OK: true, Index: 8, Body: []byte{}},
		{Tag: 3, Status: 503, Body: []byte("not serving")},
		{Tag: 4, Status: 404, Index: 9, Body: []byte{}},
		{Tag: 5, Status: 503, Body: []byte("at capacity"), RetryAfter: 1500 * time.Millisecond},
	} {
		b := AppendResponse(nil, &r)
		if len(b) != ResponseBytes(&r) {
			t.Errorf("%+v: frame of %d bytes, ResponseBytes says %d", r, len(b), ResponseBytes(&r))
		}
		frame, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResponse(frame)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestDecodeRequestErrors(t *testing.T) {
	good := AppendRequest(nil, &Request{Tag: 1, Op: OpCAS, Key: "k", ID: "i", Value: []byte("v"), HasOld: true, Old: []byte("o")})[4:]
	withByte := func(i int, v byte) []byte {
		b := bytes.Clone(good)
		b[i] = v
		return b
	}
	longKey := AppendRequest(nil, &Request{Tag: 1, Op: OpGet, Key: strings.Repeat("k", MaxKeyBytes+1)})[4:]
	longID := AppendRequest(nil, &Request{Tag: 1, Op: OpPut, Key: "k", ID: strings.Repeat("i", MaxIDBytes+1)})[4:]
	oldOnPut := AppendRequest(nil, &Request{Tag: 1, Op: OpPut, Key: "k", HasOld: true})[4:]
	issuedOnGet := AppendRequest(nil, &Request{Tag: 1, Op: OpGet, Key: "k", Issued: 5})[4:]
	issued := AppendRequest(nil, &Request{Tag: 1, Op: OpPut, Key: "k", ID: "i", Issued: 5})[4:]
	withIssued := func(v uint64) []byte {
		b := bytes.Clone(issued)
		binary.BigEndian.PutUint64(b[len(b)-8:], v)
		return b
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"empty", nil, "bytes left"},
		{"truncated", good[:len(good)-1], "bytes left"},
		{"trailing", append(bytes.Clone(good), 0), "after the request"},
		{"op zero", withByte(8, 0), "unknown op"},
		{"op unknown", withByte(8, 6), "unknown op"},
		{"flags unknown", withByte(9, 4), "unknown flags"},
		{"issued flag without the field", withByte(9, FlagOld|FlagIssued), "bytes left"},
		{"issued truncated", issued[:len(issued)-1], "bytes left"},
		{"issued zero", withIssued(0), "issued time 0"},
		{"issued negative", withIssued(1 << 63), "issued time -"},
		{"issued on a get", issuedOnGet, "issued time on a get"},
		{"key too long", longKey, "key of"},
		{"id too long", longID, "id of"},
		{"old on a put", oldOnPut, "old value on a put"},
		{"value length beyond the frame", withByte(17, 0xff), "bytes left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeRequest(tc.frame)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrMalformed with %q", err, tc.want)
			}
		})
	}
}

func TestDecodeResponseErrors(t *testing.T) {
	good := AppendResponse(nil, &Response{Tag: 1, Status: 200, Index: 2, Body: []byte("b")})[4:]
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"empty", nil},
		{"truncated", good[:len(good)-1]},
		{"trailing", append(bytes.Clone(good), 0)},
		{"flags unknown", func() []byte { b := bytes.Clone(good); b[10] = 4; return b }()},
		{"retry-after missing", func() []byte { b := bytes.Clone(good); b[10] = FlagRetryAfter; return b }()},
		{"retry-after zero", func() []byte { b := bytes.Clone(good); b[10] = FlagRetryAfter; return append(b, 0, 0, 0, 0) }()},
	} {
		if _, err := DecodeResponse(tc.frame); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", tc.name, err)
		}
	}
}

func TestReadFrame(t *testing.T) {
	b := AppendResponse(nil, &Response{Tag: 1, Body: make([]byte, 100)})
	_, n, err := ReadFrame(bufio.NewReader(bytes.NewReader(b)), 50, nil)
	if !errors.Is(err, ErrFrameTooLarge) || n != len(b)-4 {
		t.Errorf("over the limit: n, err = %d, %v; want %d, ErrFrameTooLarge", n, err, len(b)-4)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b[:10])), 1<<20, nil); err != io.ErrUnexpectedEOF {
		t.Errorf("cut short: err = %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := ReadFrame(bufio.NewReader(bytes.NewReader(nil)), 1<<20, nil); err != io.EOF {
		t.Errorf("at the end: err = %v, want io.EOF", err)
	}
}

// FuzzDecodeRequest checks that no input makes the server's decoder
// panic, and that what decodes encodes back to the same frame.
func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []Request{
		{Tag: 1, Op: OpGet, Key: "k"},
		{Tag: 6, Op: OpCAS, Key: "k", ID: "c-3", Value: []byte("new"), HasOld: true, Old: []byte("old")},
		{Tag: 7, Op: OpCAS, Key: "k", ID: "c-4", Value: []byte("new"), HasOld: true, Old: []byte("old"), Issued: 1_700_000_000_123_456_789},
	} {
		f.Add(AppendRequest(nil, &r)[4:])
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := DecodeRequest(frame)
		if err != nil {
			return
		}
		if got := AppendRequest(nil, &r)[4:]; !bytes.Equal(got, frame) {
			t.Fatalf("re-encoded %x, decoded from %x", got, frame)
		}
	})
}

// FuzzDecodeResponse does the same for the client's decoder.
func FuzzDecodeResponse(f *testing.F) {
	f.Add(AppendResponse(nil, &Response{Tag: 1, Status: 200, OK: true, Index: 2, Body: []byte("b")})[4:])
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := DecodeResponse(frame)
		if err != nil {
			return
		}
		if got := AppendResponse(nil, &r)[4:]; !bytes.Equal(got, frame) {
			t.Fatalf("re-encoded %x, decoded from %x", got, frame)
		}
	})
}
