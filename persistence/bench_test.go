package persistence

import (
	"context"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkAppend1KiB appends 1 KiB entries one per call, as delivery
// does, and waits for the last to be synced: the durable log's throughput
// with group commit. Compare with BenchmarkRawPebbleSyncedBatches, its
// ceiling on the same disk.
func BenchmarkAppend1KiB(b *testing.B) {
	l, err := Open(context.Background(), Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	payload := make([]byte, 1024)
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	for i := range b.N {
		e := Entry{Index: uint64(i + 1), Epoch: 1, Sender: uint64(i % 3), Seq: uint64(i), Payload: payload}
		if err := l.Append(e); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.WaitSynced(context.Background(), uint64(b.N)); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(b.N)/float64(l.fsyncs.Load()), "entries/fsync")
}

// BenchmarkRawPebbleSyncedBatches writes batches of 1000 × 1 KiB straight
// into Pebble, each committed with pebble.Sync, with the same key scheme
// and memtable size as the log: the baseline for BenchmarkAppend1KiB.
func BenchmarkRawPebbleSyncedBatches(b *testing.B) {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{
		Logger:       &pebbleLogger{log: slog.New(slog.DiscardHandler), fatal: func(error) {}},
		MemTableSize: pebbleMemTableSize,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	value := make([]byte, entryFixedLen+1024)
	b.SetBytes(1024)
	b.ResetTimer()
	for i := 0; i < b.N; {
		batch := db.NewBatch()
		for j := 0; j < 1000 && i < b.N; j++ {
			i++
			if err := batch.Set(makeKey(prefixEntry, uint64(i)), value, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
		_ = batch.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
