package multicast

import (
	"bytes"
	"errors"
	"testing"
)

func encodeTestBatch(seq uint64, records []batchRecord) []byte {
	var w batchWriter
	w.reset(make([]byte, 1<<16), seq)
	for _, r := range records {
		if r.large {
			w.appendLarge(r.size)
		} else {
			w.appendSmall(r.data)
		}
	}
	return append([]byte(nil), w.bytes()...)
}

func TestBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		seq     uint64
		records []batchRecord
	}{
		{"empty", 0, nil},
		{"one small", 7, []batchRecord{{size: 3, data: []byte("abc")}}},
		{"empty small", 1, []batchRecord{{size: 0, data: []byte{}}}},
		{"mixed", 1 << 40, []batchRecord{
			{size: 2, data: []byte("hi")},
			{large: true, size: 5 << 20},
			{size: 1, data: []byte("x")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frame := encodeTestBatch(tt.seq, tt.records)
			var got []batchRecord
			seq, err := decodeBatch(frame, 1024, 1<<30, func(r batchRecord) error {
				got = append(got, r)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if seq != tt.seq {
				t.Errorf("seq = %d, want %d", seq, tt.seq)
			}
			if len(got) != len(tt.records) {
				t.Fatalf("decoded %d records, want %d", len(got), len(tt.records))
			}
			for i, r := range got {
				w := tt.records[i]
				if r.large != w.large || r.size != w.size || !bytes.Equal(r.data, w.data) {
					t.Errorf("record %d = %+v, want %+v", i, r, w)
				}
			}
		})
	}
}

func TestBatchDecodeRejects(t *testing.T) {
	good := encodeTestBatch(3, []batchRecord{{size: 4, data: []byte("abcd")}, {large: true, size: 100}})
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name  string
		frame []byte
	}{
		{"short header", good[:5]},
		{"count too large", mutate(func(b []byte) []byte { b[11] = 200; return b })},
		{"count huge", mutate(func(b []byte) []byte { b[8] = 0xff; return b })},
		{"truncated record", good[:len(good)-3]},
		{"small longer than frame", mutate(func(b []byte) []byte { b[16] = 0xff; return b })},
		{"small over limit", encodeTestBatch(0, []batchRecord{{size: 2000, data: make([]byte, 2000)}})},
		{"large over limit", encodeTestBatch(0, []batchRecord{{large: true, size: 1<<30 + 1}})},
		{"unknown kind", mutate(func(b []byte) []byte { b[12] = 9; return b })},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeBatch(tt.frame, 1024, 1<<30, func(batchRecord) error { return nil })
			if !errors.Is(err, errBadBatch) {
				t.Fatalf("decodeBatch = %v, want errBadBatch", err)
			}
		})
	}
}

// FuzzDecodeBatch checks that no input makes the batch decoder panic, read
// out of bounds or accept records that break the limits.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeTestBatch(0, nil))
	f.Add(encodeTestBatch(9, []batchRecord{{size: 3, data: []byte("abc")}, {large: true, size: 1 << 20}}))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, frame []byte) {
		total := 0
		_, err := decodeBatch(frame, 512, 1<<20, func(r batchRecord) error {
			if r.size < 0 || (!r.large && (r.size > 512 || len(r.data) != r.size)) || (r.large && r.size > 1<<20) {
				t.Fatalf("decoder accepted an out-of-limits record %+v", r)
			}
			total += len(r.data)
			return nil
		})
		if err == nil && total > len(frame) {
			t.Fatalf("records hold %d bytes, frame has %d", total, len(frame))
		}
	})
}
