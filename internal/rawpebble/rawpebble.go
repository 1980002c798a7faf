// Package rawpebble measures the physical limits of durable delivery on
// this machine: Pebble instances, one per member, appending records all
// at once on the same disk. Rate is the throughput ceiling: each
// instance appends in synced batches, and no group whose members log
// every message durably to that disk can deliver faster than the slowest
// of them appends. Latency is the latency floor: each instance writes one
// record at a time, each synced, at a fixed rate, and no durable delivery
// at that rate takes less than such a write.
//
//	rate, err := rawpebble.Rate(ctx, rawpebble.Config{Instances: 3, RecordBytes: 1 << 10, Duration: 5 * time.Second})
//	p50, p99, err := rawpebble.Latency(ctx, rawpebble.Config{Instances: 3, RecordBytes: 1 << 10, PerSecond: 1000, Duration: 5 * time.Second})
package rawpebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// DefaultBatch is how many records one synced batch commits when
// Config.Batch is 0.
const DefaultBatch = 1000

// Config describes a measurement.
type Config struct {
	// Dir is where a temporary directory for the instances goes, removed
	// at the end; empty means the system's temporary directory. Put it on
	// the disk the group would log to.
	Dir string
	// Instances is how many Pebble instances append at once, one per
	// member of the group; at least 1.
	Instances int
	// RecordBytes is the size of each record's value; at least 8 (the
	// record's index is written into its first 8 bytes).
	RecordBytes int
	// Batch is how many records one synced batch of Rate commits; 0
	// means DefaultBatch.
	Batch int
	// PerSecond is how many records each instance writes per second in
	// Latency, one synced write each; at least 1 there, unused by Rate.
	PerSecond int
	// Warmup is how long the instances append before the measured
	// interval, Duration how long that interval lasts.
	Warmup, Duration time.Duration
}

// Rate runs c.Instances Pebble instances at once, each appending records
// of c.RecordBytes in synced batches for c.Warmup and then c.Duration, and
// returns the lowest rate of them in records per second over the measured
// interval.
func Rate(ctx context.Context, c Config) (float64, error) {
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Instances < 1 || c.RecordBytes < 8 || c.Batch < 1 || c.Warmup < 0 || c.Duration <= 0 {
		return 0, fmt.Errorf("rawpebble: bad config %+v", c)
	}
	rates, err := runInstances(ctx, c, appendRate)
	if err != nil {
		return 0, err
	}
	lowest := math.Inf(1)
	for _, r := range rates {
		lowest = min(lowest, r)
	}
	return lowest, nil
}

// runInstances runs run for each of c.Instances Pebble instances at
// once, each in a directory of its own under a temporary one (in c.Dir)
// removed at the end, and returns their results in order.
func runInstances[T any](ctx context.Context, c Config, run func(ctx context.Context, dir string, c Config) (T, error)) ([]T, error) {
	dir, err := os.MkdirTemp(c.Dir, "rawpebble-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := make([]T, c.Instances)
	errs := make([]error, c.Instances)
	var wg sync.WaitGroup
	for i := range c.Instances {
		wg.Go(func() {
			out[i], errs[i] = run(ctx, filepath.Join(dir, fmt.Sprint(i)), c)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// appendRate runs one instance in dir and returns its records per second
// over the measured interval.
func appendRate(ctx context.Context, dir string, c Config) (float64, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	value := make([]byte, c.RecordBytes)
	key := make([]byte, 9)
	key[0] = 'e'
	var index uint64
	counted := 0
	start := time.Now()
	measureFrom, end := start.Add(c.Warmup), start.Add(c.Warmup+c.Duration)
	// The measured interval starts with the first batch begun after the
	// warm-up and ends after the last one begun before end; it holds at
	// least one batch, however long a sync takes (a batch of the warm-up
	// that ends past end does not leave it empty).
	var measuredStart time.Time
	for {
		now := time.Now()
		if ctx.Err() != nil || now.After(end) && !measuredStart.IsZero() {
			break
		}
		if measuredStart.IsZero() && !now.Before(measureFrom) {
			measuredStart, counted = now, 0
		}
		b := db.NewBatch()
		for range c.Batch {
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
		counted += c.Batch
	}
	if measuredStart.IsZero() {
		return 0, errors.Join(errors.New("rawpebble: ended before the measured interval"), ctx.Err())
	}
	return float64(counted) / time.Since(measuredStart).Seconds(), nil
}

// Latency runs c.Instances Pebble instances at once, each writing one
// record of c.RecordBytes at a time with a synced commit, c.PerSecond of
// them per second, for c.Warmup and then c.Duration, and returns the
// median and 99th percentile of the writes' latencies over the measured
// interval, all instances together. c.Batch is not used.
func Latency(ctx context.Context, c Config) (p50, p99 time.Duration, err error) {
	if c.Instances < 1 || c.RecordBytes < 8 || c.PerSecond < 1 || c.Warmup < 0 || c.Duration <= 0 {
		return 0, 0, fmt.Errorf("rawpebble: bad config %+v", c)
	}
	samples, err := runInstances(ctx, c, writeLatencies)
	if err != nil {
		return 0, 0, err
	}
	all := slices.Concat(samples...)
	if len(all) == 0 {
		return 0, 0, errors.Join(errors.New("rawpebble: ended before the measured interval"), ctx.Err())
	}
	slices.Sort(all)
	at := func(q float64) time.Duration { return all[min(len(all)-1, int(q*float64(len(all))))] }
	return at(0.50), at(0.99), nil
}

// writeLatencies runs one instance of Latency in dir and returns the
// latencies of its writes begun in the measured interval.
func writeLatencies(ctx context.Context, dir string, c Config) ([]time.Duration, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	value := make([]byte, c.RecordBytes)
	key := make([]byte, 9)
	key[0] = 'e'
	tick := time.NewTicker(time.Second / time.Duration(c.PerSecond))
	defer tick.Stop()
	start := time.Now()
	measureFrom, end := start.Add(c.Warmup), start.Add(c.Warmup+c.Duration)
	var ds []time.Duration
	for index := uint64(1); ; index++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if now.After(end) {
			return ds, nil
		}
		binary.BigEndian.PutUint64(key[1:], index)
		binary.BigEndian.PutUint64(value, index)
		if err := db.Set(key, value, pebble.Sync); err != nil {
			return nil, err
		}
		if !now.Before(measureFrom) {
			ds = append(ds, time.Since(now))
		}
	}
}

// quietLogger discards Pebble's informational logs.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
