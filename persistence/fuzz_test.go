package persistence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// FuzzDecodeView feeds arbitrary keys and values to the view record
// decoder: it must never panic, and a record it accepts must hold the
// epoch its key names and re-encode to a record that decodes the same.
func FuzzDecodeView(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		v, err := decodeView(key, value)
		if err != nil {
			return
		}
		epoch, ok := parseKey(prefixView, key)
		if !ok || v.Epoch != epoch {
			t.Fatalf("view %d accepted under key %x", v.Epoch, key)
		}
		k, val, err := encodeView(&v)
		if err != nil {
			t.Fatalf("an accepted view does not encode: %v", err)
		}
		again, err := decodeView(k, val)
		if err != nil || !reflect.DeepEqual(again, v) {
			t.Fatalf("view %+v re-encodes as one that decodes as %+v, %v", v, again, err)
		}
	})
}

// FuzzDecodeMeta feeds arbitrary keys and values to the metadata record
// decoder (trim point, snapshot, durable mark): it must never panic, and
// what it accepts must re-encode to exactly the same record.
func FuzzDecodeMeta(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		n, data, err := decodeMeta(key, value)
		if err != nil {
			return
		}
		k, v := encodeMetaAt(key[0], binary.BigEndian.Uint64(key[1:]), n, data)
		if !bytes.Equal(k, key) || !bytes.Equal(v, value) {
			t.Fatalf("accepted %x=%x, which re-encodes as %x=%x", key, value, k, v)
		}
	})
}

// FuzzOpen writes arbitrary records into a log's store, as a damaged
// disk or another program might leave it, then opens the log and reads
// everything it says it holds. Open may refuse the store, and reads may
// fail, only with ErrCorrupt (or the errors that say an entry is not
// there); nothing may panic, and a log that opens takes new entries.
//
// The input is a sequence of records, each a key length byte, the key,
// a two-byte big-endian value length and the value; a length beyond the
// input takes what is left.
func FuzzOpen(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		fs := vfs.NewMem()
		db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: &pebbleLogger{log: slog.New(slog.DiscardHandler), fatal: func(error) {}}})
		if err != nil {
			t.Fatal(err)
		}
		for len(in) > 0 {
			var k, v []byte
			k, in = take(in[1:], int(in[0]))
			n := 0
			if len(in) >= 2 {
				n, in = int(binary.BigEndian.Uint16(in)), in[2:]
			}
			v, in = take(in, n)
			if len(k) == 0 {
				continue // Pebble takes no empty key
			}
			if err := db.Set(k, v, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}

		ctx := context.Background()
		l, err := Open(ctx, Options{Dir: "db", FS: fs})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			return
		}
		defer l.Close()
		notThere := func(err error) bool {
			return err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrTrimmed)
		}
		first, last := l.First(), l.Last()
		if first > last+1 && last != math.MaxUint64 {
			t.Fatalf("First %d, Last %d", first, last)
		}
		if _, err := l.Views(ctx); !notThere(err) {
			t.Fatalf("Views: %v", err)
		}
		if _, _, err := l.Snapshot(); !notThere(err) {
			t.Fatalf("Snapshot: %v", err)
		}
		// Entries are read one by one at both ends, and scanned whole.
		for i := first; i <= last && i-first < 4; i++ {
			if e, err := l.Get(i); !notThere(err) || err == nil && e.Index != i {
				t.Fatalf("Get(%d): %+v, %v", i, e, err)
			}
		}
		for i := last; i >= first && last-i < 4 && i > 0; i-- {
			if e, err := l.Get(i); !notThere(err) || err == nil && e.Index != i {
				t.Fatalf("Get(%d): %+v, %v", i, e, err)
			}
		}
		next := first
		err = l.Scan(ctx, first, math.MaxUint64, func(e Entry) error {
			if e.Index != next {
				t.Fatalf("Scan gave entry %d, want %d", e.Index, next)
			}
			next++
			return nil
		})
		if !notThere(err) {
			t.Fatalf("Scan: %v", err)
		}
		if last < math.MaxUint64 && first <= last+1 {
			if err := l.Append(Entry{Index: last + 1, Epoch: 9, Payload: []byte("new")}); err != nil {
				t.Fatalf("Append(%d) to a log that opened: %v", last+1, err)
			}
			if err := l.WaitSynced(ctx, last+1); err != nil {
				t.Fatalf("WaitSynced(%d): %v", last+1, err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	})
}

// take splits the first n bytes (at most all) off b.
func take(b []byte, n int) ([]byte, []byte) {
	n = min(n, len(b))
	return b[:n], b[n:]
}
