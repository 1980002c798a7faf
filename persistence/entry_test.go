package persistence

import (
	"bytes"
	"strings"
	"testing"
)

func TestEntryEncoding(t *testing.T) {
	for _, e := range []Entry{
		{Index: 1},
		{Index: 1<<64 - 1, Epoch: 1<<64 - 1, Sender: 1<<64 - 1, Seq: 1<<64 - 1, Payload: []byte{0}},
		{Index: 42, Epoch: 3, Sender: 7, Seq: 9, Payload: []byte("hello")},
		{Index: 1 << 40, Epoch: 2, Payload: bytes.Repeat([]byte{0xab}, 1<<16)},
	} {
		k, v := encodeEntry(&e)
		got, err := decodeEntry(k, v)
		if err != nil {
			t.Fatalf("decoding %d: %v", e.Index, err)
		}
		if got.Index != e.Index || got.Epoch != e.Epoch || got.Sender != e.Sender || got.Seq != e.Seq || !bytes.Equal(got.Payload, e.Payload) {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
		// The writer encodes into a batch's buffer, which may hold old
		// bytes: putEntry writes every byte.
		dk, dv := bytes.Repeat([]byte{0xff}, keyLen), bytes.Repeat([]byte{0xff}, entryValueLen(&e))
		putEntry(dk, dv, &e)
		if !bytes.Equal(dk, k) || !bytes.Equal(dv, v) {
			t.Fatalf("entry %d: putEntry into a dirty buffer differs from encodeEntry", e.Index)
		}
		if len(got.Payload) > 0 {
			v[len(v)-1]++ // the decoded entry must not alias the record
			if !bytes.Equal(got.Payload, e.Payload) {
				t.Fatal("decoded payload aliases the record")
			}
			v[len(v)-1]--
		}
	}
}

// TestEntryDamage flips every bit of a record and of its key, and
// truncates it at every length: each must be detected.
func TestEntryDamage(t *testing.T) {
	e := Entry{Index: 77, Epoch: 2, Sender: 3, Seq: 4, Payload: []byte("payload")}
	k, v := encodeEntry(&e)
	for i := range len(v) * 8 {
		v[i/8] ^= 1 << (i % 8)
		if _, err := decodeEntry(k, v); err == nil {
			t.Fatalf("bit %d of the value flipped: not detected", i)
		}
		v[i/8] ^= 1 << (i % 8)
	}
	for i := 8; i < len(k)*8; i++ { // bits of the index
		k[i/8] ^= 1 << (i % 8)
		if _, err := decodeEntry(k, v); err == nil {
			t.Fatalf("bit %d of the key flipped: not detected", i)
		}
		k[i/8] ^= 1 << (i % 8)
	}
	for n := range len(v) {
		if _, err := decodeEntry(k, v[:n]); err == nil {
			t.Fatalf("record truncated to %d bytes: not detected", n)
		}
	}
	for _, bad := range [][]byte{nil, {}, []byte("v12345678"), append([]byte{'e'}, make([]byte, 9)...)} {
		if _, err := decodeEntry(bad, v); err == nil || !strings.Contains(err.Error(), "key") {
			t.Fatalf("key %x: %v", bad, err)
		}
	}
}

func TestMetaEncoding(t *testing.T) {
	k, v := encodeMeta(metaSnapshot, 99, []byte("abc"))
	n, d, err := decodeMeta(k, v)
	if err != nil || n != 99 || string(d) != "abc" {
		t.Fatalf("decodeMeta: %d %q %v", n, d, err)
	}
	if _, _, err := decodeMeta(k, v[:headerLen+7]); err == nil {
		t.Fatal("short metadata record not detected")
	}
	vk, vv, err := encodeView(ptr(membershipViewFor(5)))
	if err != nil {
		t.Fatal(err)
	}
	// A view record moved to another epoch's key is detected.
	if _, err := decodeView(makeKey(prefixView, 6), vv); err == nil {
		t.Fatal("view record under the wrong key not detected")
	}
	if _, err := decodeView(vk, vv); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeEntry feeds arbitrary keys and values to the entry decoder: it
// must never panic, and whatever it accepts must re-encode to exactly the
// same record.
func FuzzDecodeEntry(f *testing.F) {
	for _, e := range []Entry{
		{Index: 1},
		{Index: 42, Epoch: 3, Sender: 7, Seq: 9, Payload: []byte("hello")},
	} {
		k, v := encodeEntry(&e)
		f.Add(k, v)
	}
	f.Add([]byte{'e'}, []byte{})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		e, err := decodeEntry(key, value)
		if err != nil {
			return
		}
		k, v := encodeEntry(&e)
		if !bytes.Equal(k, key) || !bytes.Equal(v, value) {
			t.Fatalf("accepted %x=%x, which re-encodes as %x=%x", key, value, k, v)
		}
	})
}

func ptr[T any](v T) *T { return &v }
