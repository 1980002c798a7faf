package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// The physical limits measured in the same run as the systems, on the
// disk that holds their data: workload f.
const (
	// pebbleInstances append at once, as the three replicas of a durable
	// system do.
	pebbleInstances = 3
	// pebbleBatch is how many records one synced batch commits.
	pebbleBatch = 1000
	// physicalRecord is the record and write size.
	physicalRecord = 1 << 10
	// syncFileBytes is the size of the file that synced writes cycle
	// through: allocated and synced before the measurement, so that a
	// write changes no file size.
	syncFileBytes = 64 << 20
)

// runPhysical measures both limits in directories under root and returns
// a sample of each: "pebble-3x" counts records appended per second by the
// slowest of the Pebble instances; "fsync" times writes of one record
// each followed by fsync, one at a time.
func runPhysical(ctx context.Context, root string, t timing) ([]sample, error) {
	dir, err := os.MkdirTemp(root, "physical-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	cpu0 := selfCPU()
	rate, err := pebbleRate(ctx, dir, t)
	if err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	pebbleSample := sample{
		Workload:  "f",
		System:    fmt.Sprintf("pebble-%dx", pebbleInstances),
		Size:      physicalRecord,
		OpsPerSec: rate,
		Ops:       int(rate * t.duration.Seconds()),
		CPUCores:  (selfCPU() - cpu0).Seconds() / (t.warmup + t.duration).Seconds(),
	}

	cpu0 = selfCPU()
	fsyncSample, err := syncedWrites(ctx, filepath.Join(dir, "synced"), t)
	if err != nil {
		return nil, fmt.Errorf("synced writes: %w", err)
	}
	fsyncSample.CPUCores = (selfCPU() - cpu0).Seconds() / (t.warmup + t.duration).Seconds()
	return []sample{pebbleSample, fsyncSample}, nil
}

// pebbleRate runs pebbleInstances Pebble instances at once, each
// appending records in synced batches, and returns the lowest rate of
// them in records per second.
func pebbleRate(ctx context.Context, dir string, t timing) (float64, error) {
	rates := make([]float64, pebbleInstances)
	errs := make([]error, pebbleInstances)
	var wg sync.WaitGroup
	for i := range pebbleInstances {
		wg.Go(func() {
			rates[i], errs[i] = pebbleOne(ctx, filepath.Join(dir, fmt.Sprint(i)), t)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	lowest := math.Inf(1)
	for _, r := range rates {
		lowest = min(lowest, r)
	}
	return lowest, nil
}

func pebbleOne(ctx context.Context, dir string, t timing) (float64, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	value := make([]byte, physicalRecord)
	key := make([]byte, 9)
	key[0] = 'e'
	var index uint64
	counted := 0
	start := time.Now()
	measureFrom, end := start.Add(t.warmup), start.Add(t.warmup+t.duration)
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
		for range pebbleBatch {
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
		counted += pebbleBatch
	}
	if measuredStart.IsZero() {
		return 0, errors.Join(errors.New("ended before the measured interval"), ctx.Err())
	}
	return float64(counted) / time.Since(measuredStart).Seconds(), nil
}

// syncedWrites writes one record at a time into a preallocated file at
// path, each followed by fsync, and returns their rate and latency.
func syncedWrites(ctx context.Context, path string, t timing) (sample, error) {
	s := sample{Workload: "f", System: "fsync", Size: physicalRecord}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return s, err
	}
	defer f.Close()
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < syncFileBytes; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			return s, err
		}
	}
	if err := f.Sync(); err != nil {
		return s, err
	}
	record := make([]byte, physicalRecord)
	start := time.Now()
	r := &recorder{measureFrom: start.Add(t.warmup), end: start.Add(t.warmup + t.duration)}
	var off int64
	for ctx.Err() == nil {
		began := time.Now()
		if !began.Before(r.end) {
			break
		}
		if _, err := f.WriteAt(record, off); err != nil {
			return s, err
		}
		err := f.Sync()
		r.record(began, time.Now(), err)
		if err != nil {
			return s, err
		}
		off = (off + physicalRecord) % syncFileBytes
	}
	r.fill(&s, t.duration)
	return s, ctx.Err()
}

// quietPebble discards Pebble's informational logs.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
