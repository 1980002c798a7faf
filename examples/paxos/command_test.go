package paxos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
)

// commandSeeds are well-formed commands of every kind.
var commandSeeds = []command{
	{op: opPut, id: "c1-1", key: "k", value: []byte("v")},
	{op: opPut, id: "c1-2", key: "empty value", value: []byte{}},
	{op: opPut, id: "c1-3", key: strings.Repeat("k", MaxKeyBytes), value: bytes.Repeat([]byte{0xff}, 300)},
	{op: opDelete, id: "c2-1", key: "k"},
	{op: opCAS, id: "c3-1", key: "k", hasOld: true, old: []byte("a"), value: []byte("b")},
	{op: opCAS, id: "c3-2", key: "k", value: []byte("b")},
	{op: opBarrier, id: "barrier-1"},
	{op: opPut, id: "c4-1", issued: 1_700_000_000_123_456_789, key: "k", value: []byte("v")},
	{op: opDelete, id: "c4-2", issued: 1, key: "k"},
	{op: opCAS, id: "c4-3", issued: math.MaxInt64, key: "k", hasOld: true, old: []byte("a"), value: []byte("b")},
	{op: opBarrier, id: "barrier-2", issued: 5},
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range commandSeeds {
		t.Run(c.op.String()+"/"+c.id, func(t *testing.T) {
			b := encodeCommand(c)
			if want := byte(commandVersion); c.issued == 0 && b[0] != commandVersionV1 || c.issued != 0 && b[0] != want {
				t.Fatalf("version %d for issued %d", b[0], c.issued)
			}
			got, err := decodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			if !sameCommand(got, c) {
				t.Fatalf("decoded %+v, want %+v", got, c)
			}
		})
	}
}

// TestDecodeCommandRejects: a malformed command is an error wrapping
// errMalformed, never a panic or a partly filled command.
func TestDecodeCommandRejects(t *testing.T) {
	put := encodeCommand(command{op: opPut, id: "r", key: "k", value: []byte("v")})
	cas := encodeCommand(command{op: opCAS, id: "r", key: "k", value: []byte("v")})
	longKey := encodeCommand(command{op: opPut, id: "r", key: strings.Repeat("k", MaxKeyBytes+1)})
	longID := encodeCommand(command{op: opDelete, id: strings.Repeat("r", MaxRequestIDBytes+1), key: "k"})
	casFlags := bytes.Clone(cas)
	casFlags[2+1+1+1+1] = 2 // version, op, id "r", key "k", then flags
	// Version 2: version, op, id "r", then the issued time.
	v2 := func(issued ...byte) []byte {
		return append(append([]byte{commandVersion, byte(opDelete), 1, 'r'}, issued...), 1, 'k')
	}
	maxInt64 := binary.AppendUvarint(nil, math.MaxInt64)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version only", []byte{commandVersion}},
		{"other version", append([]byte{3}, put[1:]...)},
		{"version 0", append([]byte{0}, put[1:]...)},
		{"version 2 without an issued time", append([]byte{commandVersion}, put[1:]...)},
		{"issued time zero", v2(0)},
		{"issued time above MaxInt64", v2(binary.AppendUvarint(nil, math.MaxInt64+1)...)},
		{"issued time overflowing", v2(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"issued time truncated", []byte{commandVersion, byte(opDelete), 1, 'r', 0x80}},
		{"version 2 truncated after the issued time", append([]byte{commandVersion, byte(opDelete), 1, 'r'}, maxInt64...)},
		{"unknown op", append([]byte{commandVersion, 9}, put[2:]...)},
		{"op zero", append([]byte{commandVersion, 0}, put[2:]...)},
		{"truncated", put[:len(put)-1]},
		{"trailing byte", append(bytes.Clone(put), 0)},
		{"empty request id", encodeCommand(command{op: opPut, key: "k"})},
		{"empty key", encodeCommand(command{op: opDelete, id: "r"})},
		{"key too long", longKey},
		{"request id too long", longID},
		{"cas flags", casFlags},
		{"huge length", []byte{commandVersion, byte(opPut), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"overflowing varint", []byte{commandVersion, byte(opPut), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCommand(tc.b)
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decoded %+v, err %v; want errMalformed", c, err)
			}
		})
	}
}

func sameCommand(a, b command) bool {
	return a.op == b.op && a.id == b.id && a.issued == b.issued && a.key == b.key && bytes.Equal(a.value, b.value) &&
		a.hasOld == b.hasOld && bytes.Equal(a.old, b.old)
}

// FuzzDecodeCommand: decoding never panics, and whatever decodes encodes
// back to a command that decodes the same.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range commandSeeds {
		f.Add(encodeCommand(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCommand(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		again, err := decodeCommand(encodeCommand(c))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", c, err)
		}
		if !sameCommand(again, c) {
			t.Fatalf("re-encoded %+v as %+v", c, again)
		}
	})
}

func TestBatchRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, len(commandSeeds)} {
		b := encodeBatch(commandSeeds[:n])
		if b[0] != commandVersionBatch {
			t.Fatalf("version %d, want %d", b[0], commandVersionBatch)
		}
		dst := []command{{op: opBarrier, id: "before"}}
		got, err := decodeCommands(dst, b)
		if err != nil {
			t.Fatalf("%d commands: %v", n, err)
		}
		if len(got) != 1+n || got[0].id != "before" {
			t.Fatalf("%d commands: decoded %d after the 1 there", n, len(got)-1)
		}
		for i, c := range got[1:] {
			if !sameCommand(c, commandSeeds[i]) {
				t.Errorf("command %d of %d: decoded %+v, want %+v", i, n, c, commandSeeds[i])
			}
		}
	}
	// A single command decodes as a delivery of one.
	got, err := decodeCommands(nil, encodeCommand(commandSeeds[0]))
	if err != nil || len(got) != 1 || !sameCommand(got[0], commandSeeds[0]) {
		t.Fatalf("single command: %+v, %v", got, err)
	}
}

// TestDecodeBatchRejects: a malformed batch, or one holding a malformed
// command, is an error wrapping errMalformed and appends nothing.
func TestDecodeBatchRejects(t *testing.T) {
	put := encodeCommand(commandSeeds[0])
	del := encodeCommand(commandSeeds[3])
	batch := func(count int, cmds ...[]byte) []byte {
		b := binary.AppendUvarint([]byte{commandVersionBatch}, uint64(count))
		for _, c := range cmds {
			b = appendField(b, c)
		}
		return b
	}
	two := batch(2, put, del)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"version only", []byte{commandVersionBatch}},
		{"no commands", batch(0)},
		{"count above the commands", batch(3, put, del)},
		{"count above the bytes", batch(1<<20, put)},
		{"count overflowing", []byte{commandVersionBatch, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"a batch in a batch", batch(2, put, two)},
		{"a malformed command", batch(2, put, put[:len(put)-1])},
		{"an empty command", batch(2, put, nil)},
		{"truncated", two[:len(two)-1]},
		{"trailing byte", append(bytes.Clone(two), 0)},
		{"command length beyond the batch", append(binary.AppendUvarint([]byte{commandVersionBatch, 1}, 1<<40), put...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []command{{op: opBarrier, id: "before"}}
			got, err := decodeCommands(dst, tc.b)
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decoded %+v, err %v; want errMalformed", got, err)
			}
			if len(got) != 1 {
				t.Fatalf("appended %d commands", len(got)-1)
			}
		})
	}
}

// FuzzDecodeCommands: decoding a delivery, one command or a batch, never
// panics, and whatever decodes encodes back to the same commands.
func FuzzDecodeCommands(f *testing.F) {
	f.Add(encodeBatch(commandSeeds))
	f.Add(encodeBatch(commandSeeds[:1]))
	f.Add(encodeCommand(commandSeeds[0]))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := decodeCommands(nil, b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			if len(cs) != 0 {
				t.Fatalf("%d commands with an error", len(cs))
			}
			return
		}
		if len(cs) == 0 {
			t.Fatal("no commands and no error")
		}
		again, err := decodeCommands(nil, encodeBatch(cs))
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", cs, err)
		}
		if len(again) != len(cs) {
			t.Fatalf("re-encoded %d commands as %d", len(cs), len(again))
		}
		for i := range cs {
			if !sameCommand(again[i], cs[i]) {
				t.Fatalf("re-encoded %+v as %+v", cs[i], again[i])
			}
		}
	})
}
