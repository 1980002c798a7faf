package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// rawPebbleBatch is how many records the raw baseline commits per synced
// batch.
const rawPebbleBatch = 1000

// rawPebbleRate is the physical baseline of durable delivery: n Pebble
// instances, one per member data directory, each appending records of
// size bytes (plus a small header, as the durable log's) in synced
// batches, all at once, for warmup and then duration. It returns the
// lowest rate of them in records per second.
func rawPebbleRate(ctx context.Context, n, size int, warmup, duration time.Duration) (float64, error) {
	dir, err := os.MkdirTemp("", "convoy-bench-rawpebble-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	rates := make([]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rates[i], errs[i] = rawPebbleOne(ctx, filepath.Join(dir, fmt.Sprint(i)), size, warmup, duration)
		})
	}
	wg.Wait()
	lowest := math.Inf(1)
	for i := range n {
		if errs[i] != nil {
			return 0, errs[i]
		}
		lowest = min(lowest, rates[i])
	}
	return lowest, nil
}

func rawPebbleOne(ctx context.Context, dir string, size int, warmup, duration time.Duration) (float64, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	value := make([]byte, size+32)
	key := make([]byte, 9)
	key[0] = 'e'
	var index, counted uint64
	start := time.Now()
	measureFrom, end := start.Add(warmup), start.Add(warmup+duration)
	var measuredStart time.Time
	for {
		now := time.Now()
		if now.After(end) || ctx.Err() != nil {
			break
		}
		if measuredStart.IsZero() && !now.Before(measureFrom) {
			measuredStart, counted = now, 0
		}
		b := db.NewBatch()
		for range rawPebbleBatch {
			index++
			binary.BigEndian.PutUint64(key[1:], index)
			binary.BigEndian.PutUint64(value, index)
			if err := b.Set(key, value, nil); err != nil {
				b.Close()
				return 0, err
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			b.Close()
			return 0, err
		}
		b.Close()
		counted += rawPebbleBatch
	}
	if measuredStart.IsZero() {
		return 0, ctx.Err()
	}
	return float64(counted) / time.Since(measuredStart).Seconds(), nil
}

// quietPebble discards Pebble's informational logs.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
