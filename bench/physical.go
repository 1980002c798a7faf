package main

import (
	"context"
	"fmt"
	"io"
	"net"
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

// floorSystem names the floor's row (workload.floor).
const floorSystem = "floor"

// floorMessage is the size of a round trip's message, as a 64-byte
// write's request.
const floorMessage = 64

// runFloor measures, on the disk under root and on loopback TCP, what a
// replicated write cannot go below: one synced write (syncedWrites) and
// one round trip between two processes' sockets. It returns a sample of
// workload w whose latencies are the sums of the two's (p50 with p50,
// p99 with p99).
func runFloor(ctx context.Context, root, w string, t timing) (sample, error) {
	dir, err := os.MkdirTemp(root, "floor-")
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	cpu0 := selfCPU()
	synced, err := syncedWrites(ctx, filepath.Join(dir, "synced"), t)
	if err != nil {
		return sample{}, fmt.Errorf("synced writes: %w", err)
	}
	rtt, err := roundTrips(ctx, t)
	if err != nil {
		return sample{}, fmt.Errorf("round trips: %w", err)
	}
	s := sample{
		Workload: w, System: floorSystem, Size: floorMessage,
		P50Us:    synced.P50Us + rtt.P50Us,
		P99Us:    synced.P99Us + rtt.P99Us,
		CPUCores: (selfCPU() - cpu0).Seconds() / (2 * (t.warmup + t.duration)).Seconds(),
	}
	// Its rate: one floor-long operation after another.
	if s.P50Us > 0 {
		s.OpsPerSec = 1e6 / s.P50Us
	}
	s.Ops = int(s.OpsPerSec * t.duration.Seconds())
	for i := range synced.Latency {
		if i < len(rtt.Latency) && rtt.Latency[i].Q == synced.Latency[i].Q {
			s.Latency = append(s.Latency, quantile{Q: synced.Latency[i].Q, Us: synced.Latency[i].Us + rtt.Latency[i].Us})
		}
	}
	return s, nil
}

// roundTrips sends floorMessage bytes over loopback TCP to an echo and
// reads them back, one round trip at a time, and returns their latency.
func roundTrips(ctx context.Context, t timing) (sample, error) {
	var s sample
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, err
	}
	defer ln.Close()
	echoed := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer conn.Close()
		_, err = io.Copy(conn, conn)
		echoed <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return s, err
	}
	msg := make([]byte, floorMessage)
	start := time.Now()
	r := &recorder{measureFrom: start.Add(t.warmup), end: start.Add(t.warmup + t.duration)}
	for ctx.Err() == nil {
		began := time.Now()
		if !began.Before(r.end) {
			break
		}
		_, err := conn.Write(msg)
		if err == nil {
			_, err = io.ReadFull(conn, msg)
		}
		r.record(began, time.Now(), err)
		if err != nil {
			conn.Close()
			return s, err
		}
	}
	conn.Close()
	if err := <-echoed; err != nil {
		return s, fmt.Errorf("echo: %w", err)
	}
	r.fill(&s, t.duration)
	return s, ctx.Err()
}

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
