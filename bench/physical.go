package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/convoy-gcs/convoy/internal/rawpebble"
)

// The physical limits measured in the same run as the systems, on the
// disk that holds their data: workload f.
const (
	// pebbleInstances append at once, as the three replicas of a durable
	// system do, in synced batches of rawpebble.DefaultBatch records.
	pebbleInstances = 3
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
	rate, err := rawpebble.Rate(ctx, rawpebble.Config{
		Dir:         dir,
		Instances:   pebbleInstances,
		RecordBytes: physicalRecord,
		Warmup:      t.warmup,
		Duration:    t.duration,
	})
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
