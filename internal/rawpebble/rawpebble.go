// Package rawpebble measures the physical ceiling of durable delivery on
// this machine: Pebble instances, one per member, each appending records
// in synced batches, all at once, on the same disk. No group whose members
// log every message durably to that disk can deliver faster than the
// slowest of them appends.
//
//	rate, err := rawpebble.Rate(ctx, rawpebble.Config{Instances: 3, RecordBytes: 1 << 10, Duration: 5 * time.Second})
package rawpebble

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
	// Batch is how many records one synced batch commits; 0 means
	// DefaultBatch.
	Batch int
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
	dir, err := os.MkdirTemp(c.Dir, "rawpebble-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	rates := make([]float64, c.Instances)
	errs := make([]error, c.Instances)
	var wg sync.WaitGroup
	for i := range c.Instances {
		wg.Go(func() {
			rates[i], errs[i] = appendRate(ctx, filepath.Join(dir, fmt.Sprint(i)), c)
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

// quietLogger discards Pebble's informational logs.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
