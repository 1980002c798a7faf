package engine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/convoy-gcs/convoy/persistence"
)

func TestSuffixEncoding(t *testing.T) {
	es := []persistence.Entry{
		{Index: 7, Epoch: 2, Sender: 1, Seq: 3, Payload: []byte("a")},
		{Index: 8, Epoch: 2, Sender: 3, Seq: 1, Payload: nil},
		{Index: 9, Epoch: 3, Sender: 2, Seq: 9, Payload: bytes.Repeat([]byte{0xff}, 300)},
	}
	b := encodeSuffix(es)
	got, err := decodeSuffix(b, 7, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if got[i].Index != es[i].Index || got[i].Epoch != es[i].Epoch || got[i].Sender != es[i].Sender ||
			got[i].Seq != es[i].Seq || !bytes.Equal(got[i].Payload, es[i].Payload) {
			t.Fatalf("entry %d: %+v, want %+v", i, got[i], es[i])
		}
	}
	if got, err := decodeSuffix(encodeSuffix(nil), 10, 9); err != nil || len(got) != 0 {
		t.Fatalf("empty suffix: %v %v", got, err)
	}
	for _, tc := range []struct {
		name     string
		b        []byte
		from, to uint64
	}{
		{"empty input", nil, 1, 1},
		{"unknown version", append([]byte{9}, b[1:]...), 7, 9},
		{"not the range asked for", b, 8, 10},
		{"fewer entries than asked", b, 7, 10},
		{"truncated", b[:len(b)-1], 7, 9},
		{"trailing bytes", append(append([]byte(nil), b...), 0), 7, 9},
		{"huge count", []byte{suffixVersion, 0xff, 0xff, 0xff, 0xff, 0x0f}, 1, 1 << 32},
		{"payload beyond the input", []byte{suffixVersion, 1, 1, 1, 1, 1, 100, 'x'}, 1, 1},
	} {
		if _, err := decodeSuffix(tc.b, tc.from, tc.to); !errors.Is(err, errBadSuffix) {
			t.Errorf("%s: %v, want errBadSuffix", tc.name, err)
		}
	}
}

// FuzzDecodeSuffix: a suffix transfer comes from the network; decoding
// never panics, and what decodes encodes back to the same bytes.
func FuzzDecodeSuffix(f *testing.F) {
	f.Add(encodeSuffix([]persistence.Entry{{Index: 1, Epoch: 1, Sender: 1, Seq: 1, Payload: []byte("x")}}), uint64(1), uint64(1))
	f.Add(encodeSuffix(nil), uint64(5), uint64(4))
	f.Add([]byte{suffixVersion, 2, 3, 1, 1, 1, 0, 4, 1, 1, 2, 1, 'z'}, uint64(3), uint64(4))
	f.Fuzz(func(t *testing.T, b []byte, from, to uint64) {
		es, err := decodeSuffix(b, from, to)
		if err != nil {
			return
		}
		if again := encodeSuffix(es); !bytes.Equal(again, b) {
			// Uvarints have one shortest form; longer ones decode too.
			if _, err := decodeSuffix(again, from, to); err != nil {
				t.Fatalf("re-encoding does not decode: %v", err)
			}
		}
	})
}

// FuzzDecodeParts: a snapshot's metadata comes from disk; whatever it
// holds, decodeParts returns parts or errBadSnapshot, and parts encode
// back to something that decodes to the same parts.
func FuzzDecodeParts(f *testing.F) {
	f.Add(encodeParts(nil))
	f.Add(encodeParts([][]byte{[]byte("one"), nil, []byte("three")}))
	f.Add([]byte{snapshotVersion, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		parts, err := decodeParts(b)
		if err != nil {
			if !errors.Is(err, errBadSnapshot) {
				t.Fatalf("decodeParts: %v, want errBadSnapshot", err)
			}
			return
		}
		again, err := decodeParts(encodeParts(parts))
		if err != nil || len(again) != len(parts) {
			t.Fatalf("re-encoding: %d parts, %v; want %d", len(again), err, len(parts))
		}
		for i := range parts {
			if !bytes.Equal(again[i], parts[i]) {
				t.Fatalf("part %d: %q, want %q", i, again[i], parts[i])
			}
		}
	})
}

func TestSnapshotPartsEncoding(t *testing.T) {
	parts := [][]byte{[]byte("one"), nil, bytes.Repeat([]byte("z"), 1000)}
	got, err := decodeParts(encodeParts(parts))
	if err != nil || len(got) != 3 || string(got[0]) != "one" || len(got[1]) != 0 || len(got[2]) != 1000 {
		t.Fatalf("round trip: %q %v", got, err)
	}
	b := encodeParts(parts)
	for _, bad := range [][]byte{nil, {2}, b[:len(b)-1], append(append([]byte(nil), b...), 1), {snapshotVersion, 0xff, 0xff, 0x7f}} {
		if _, err := decodeParts(bad); !errors.Is(err, errBadSnapshot) {
			t.Errorf("decodeParts(%x): %v, want errBadSnapshot", bad, err)
		}
	}
}
