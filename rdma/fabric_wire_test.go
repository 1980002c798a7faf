package rdma

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestFabricHelloRoundTrip(t *testing.T) {
	for _, h := range []fabHello{
		{kind: fabKindControl, from: 1, to: 2, gen: 0xdeadbeef},
		{kind: fabKindData, immHdr: true, from: 3, to: 9, gen: 7, stream: 1 << 40, connInst: 5, accInst: 6},
	} {
		var b [fabHelloLen]byte
		encodeFabHello(b[:], h)
		got, err := decodeFabHello(b[:])
		if err != nil || got != h {
			t.Errorf("decode(encode(%+v)) = %+v, %v", h, got, err)
		}
	}
}

func TestFabricHelloRejected(t *testing.T) {
	good := func() []byte {
		b := make([]byte, fabHelloLen)
		encodeFabHello(b, fabHello{kind: fabKindData, from: 1, to: 2, stream: 3})
		return b
	}
	for _, c := range []struct {
		name   string
		mangle func(b []byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:fabHelloLen-1] }, "short hello"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		{"version", func(b []byte) []byte { b[5] = 9; return b }, "version"},
		{"kind", func(b []byte) []byte { b[6] = 7; return b }, "kind"},
		{"flags", func(b []byte) []byte { b[7] = 0x80; return b }, "flags"},
		{"control with stream", func(b []byte) []byte { b[6] = byte(fabKindControl); return b }, "stream fields"},
	} {
		_, err := decodeFabHello(c.mangle(good()))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
	}
}

func TestCtrlPacketRoundTrip(t *testing.T) {
	recs := []ctrlRecord{
		{typ: ctrlOpen, stream: 1, a: 2},
		{typ: ctrlSignal, stream: 1, a: 3, b: 1<<64 - 1},
		{typ: ctrlCredit, stream: 1 << 60, a: 1 << 20},
		{typ: ctrlNotice, stream: 4, a: 5, b: 6},
		{typ: ctrlClose, stream: 1, a: 2},
	}
	for n := range len(recs) + 1 {
		b := make([]byte, ctrlSlotLen)
		size := encodeCtrlPacket(b, uint32(n), recs[:n])
		var got []ctrlRecord
		acks, err := decodeCtrlPacket(b[:size], func(r ctrlRecord) error {
			got = append(got, r)
			return nil
		})
		if err != nil || acks != uint32(n) || !reflect.DeepEqual(got, recs[:n]) && n > 0 {
			t.Errorf("%d records: decoded %v (acks %d, %v)", n, got, acks, err)
		}
	}
	full := make([]ctrlRecord, ctrlMaxRecords)
	for i := range full {
		full[i] = ctrlRecord{typ: ctrlSignal, stream: StreamID(i), a: uint64(i)}
	}
	b := make([]byte, ctrlSlotLen)
	if size := encodeCtrlPacket(b, 0, full); size != ctrlSlotLen {
		t.Errorf("a full packet is %d bytes, want the slot's %d", size, ctrlSlotLen)
	}
}

func TestCtrlPacketRejected(t *testing.T) {
	good := func() []byte {
		b := make([]byte, ctrlSlotLen)
		n := encodeCtrlPacket(b, 1, []ctrlRecord{{typ: ctrlSignal, stream: 1}, {typ: ctrlCredit, stream: 2, a: 10}})
		return b[:n]
	}
	for _, c := range []struct {
		name   string
		mangle func(b []byte) []byte
		want   string
	}{
		{"short", func(b []byte) []byte { return b[:3] }, "short"},
		{"version", func(b []byte) []byte { b[0] = 2; return b }, "version"},
		{"reserved", func(b []byte) []byte { b[3] = 1; return b }, "reserved"},
		{"count", func(b []byte) []byte { b[1] = 3; return b }, "holding 3 records"},
		{"too many", func(b []byte) []byte { b[1] = ctrlMaxRecords + 1; return b }, "records"},
		{"trailing", func(b []byte) []byte { return append(b, 0) }, "records"},
		{"type", func(b []byte) []byte { b[ctrlHeaderLen+ctrlRecordLen] = 99; return b }, "type 99"},
		{"record reserved", func(b []byte) []byte { b[ctrlHeaderLen+5] = 1; return b }, "reserved"},
	} {
		calls := 0
		_, err := decodeCtrlPacket(c.mangle(good()), func(ctrlRecord) error { calls++; return nil })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error about %q", c.name, err, c.want)
		}
		if calls != 0 {
			t.Errorf("%s: %d records handed out of a bad packet", c.name, calls)
		}
	}
	// A record the receiver refuses stops the packet there.
	stop := errors.New("stop")
	calls := 0
	if _, err := decodeCtrlPacket(good(), func(ctrlRecord) error { calls++; return stop }); err != stop || calls != 1 {
		t.Errorf("refused record: %v after %d records, want stop after 1", err, calls)
	}
}

// FuzzCtrlPacket checks that any input decodes without panicking, and
// that what decodes encodes back to the same bytes.
func FuzzCtrlPacket(f *testing.F) {
	b := make([]byte, ctrlSlotLen)
	f.Add(b[:encodeCtrlPacket(b, 3, []ctrlRecord{{typ: ctrlOpen, stream: 1, a: 1}, {typ: ctrlSignal, stream: 1, b: 9}})])
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		var recs []ctrlRecord
		acks, err := decodeCtrlPacket(in, func(r ctrlRecord) error {
			recs = append(recs, r)
			return nil
		})
		if err != nil {
			return
		}
		out := make([]byte, ctrlSlotLen)
		if n := encodeCtrlPacket(out, acks, recs); !bytes.Equal(out[:n], in) {
			t.Fatalf("re-encoded %x, want %x", out[:n], in)
		}
	})
}
