package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// workload is one of the measurements every system goes through.
type workload struct {
	name  string // as in -workloads: a letter
	title string
	// size is the value size in bytes; keys picks keys uniformly among
	// that many.
	size, keys int
	// clients lists the client counts swept in a closed loop (each client
	// sends its next write when the last is acknowledged); the best
	// throughput of them is reported. rate, if set instead, is an open
	// loop: writes start at this many per second whatever the answers.
	clients []int
	rate    float64
	// durableOnly skips the systems that run without fsync.
	durableOnly bool
	// service says the workload measures the systems that are
	// key-value services as users run them (system.service), not the
	// replication engines (system.engine).
	service bool
	// reference, if set, names the system every other is compared with,
	// instead of each system's own reference.
	reference string
	// physical measures the machine's limits instead of a system.
	physical bool
	// multicast runs convoy bench multicast instead of measuring a system.
	multicast bool
	// floor adds a row "floor" to the workload's table, measured on the
	// machine in each repetition: one synced write's latency plus one
	// loopback round trip's (runFloor), which the rows' p50 is compared
	// with.
	floor bool
	// ratioOf is what the tables compare with Convoy's: "ops/s" (higher
	// is better) or "p50" (lower is better).
	ratioOf string
}

// workloadSet returns every workload, with clients as the sweep of the
// saturation workloads and bigClients the client count for 1 MiB values.
func workloadSet(clients []int, bigClients int) []workload {
	return []workload{
		{name: "a", title: "64-byte writes at saturation", size: 64, keys: 10000, clients: clients, ratioOf: "ops/s"},
		{name: "b", title: "1 KiB durable writes at saturation", size: 1 << 10, keys: 10000, clients: clients, durableOnly: true, ratioOf: "ops/s"},
		{name: "c", title: "64-byte durable writes at a fixed open-loop load of 1,000 ops/s", size: 64, keys: 10000, rate: 1000, durableOnly: true, ratioOf: "p50"},
		{name: "d", title: "1 MiB durable writes at saturation", size: 1 << 20, keys: 64, clients: []int{bigClients}, durableOnly: true, ratioOf: "ops/s"},
		{name: "e", title: "the service as users run it: 64-byte writes through its client at saturation", size: 64, keys: 10000, clients: clients, service: true, reference: "convoy-kv", ratioOf: "ops/s"},
		{name: "f", title: "physical limits: three Pebble instances appending synced 1 KiB batches on one disk; one synced 1 KiB write", physical: true},
		{name: "g", title: "the service at light load: one client's 64-byte writes, one at a time, against the floor (one synced 1 KiB write plus one loopback round trip)", size: 64, keys: 10000, clients: []int{1}, service: true, reference: floorSystem, floor: true, ratioOf: "p50"},
		{name: multicastWorkload, title: "multicast of one message to a group, against unicast to one receiver (convoy bench multicast)", multicast: true},
	}
}

func parseWorkloads(list string, all []workload) ([]workload, error) {
	want := make(map[string]bool)
	for _, name := range strings.Split(list, ",") {
		want[strings.TrimSpace(name)] = true
	}
	var out []workload
	for _, w := range all {
		if want[w.name] {
			out = append(out, w)
			delete(want, w.name)
		}
	}
	for name := range want {
		return nil, fmt.Errorf("-workloads: unknown workload %q", name)
	}
	return out, nil
}

func (w workload) appliesTo(s system) bool {
	switch {
	case w.physical, w.multicast, w.durableOnly && !s.durable:
		return false
	case w.service:
		return s.service
	default:
		return s.engine
	}
}

// sample is one measured point.
type sample struct {
	Rep      int     `json:"rep"`
	Workload string  `json:"workload"`
	System   string  `json:"system"`
	Clients  int     `json:"clients,omitempty"`
	Rate     float64 `json:"rate,omitempty"`
	Size     int     `json:"size"`
	// Ops are the writes started (for an open loop, due) in the measured
	// interval and acknowledged, OpsPerSec their rate; P50Us and P99Us
	// percentiles of their latency, in microseconds: from the call for a
	// closed loop, from the time the write was due for an open loop. A
	// write still in flight when the interval ends counts with its whole
	// latency, however long after the end it completes (up to the bound
	// on one call): a system that falls behind shows it.
	Ops       int     `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Us     float64 `json:"p50_us"`
	P99Us     float64 `json:"p99_us"`
	// Latency is the distribution of the same latencies, at every
	// quantile of latencyQuantiles; empty if no write was acknowledged.
	Latency []quantile `json:"latency,omitempty"`
	// CPUCores is the CPU time the system's processes used in the
	// measured interval over its length: 1 is one core busy throughout.
	CPUCores float64 `json:"cpu_cores"`
	// Timeouts counts the writes started in the measured interval that
	// took longer than the bound on one call, those still in flight at
	// the end included; Errors other failed writes, the first of which is
	// FirstError.
	Timeouts   int    `json:"timeouts"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// timing is how long a point runs.
type timing struct {
	warmup, duration time.Duration
	// callTimeout bounds one write.
	callTimeout time.Duration
}

// recorder collects the outcome of a point's writes, from many
// goroutines.
type recorder struct {
	measureFrom, end time.Time

	mu        sync.Mutex
	latencies []time.Duration
	timeouts  int
	errors    int
	firstErr  error
}

// record counts a write that started at start (or was due then) and ended
// at done with err. Only writes that start in the measured interval
// count, wherever they end: counting by the start takes as many writes
// that straddle its beginning out as writes that straddle its end in.
func (r *recorder) record(start, done time.Time, err error) {
	if start.Before(r.measureFrom) || !start.Before(r.end) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil:
		r.latencies = append(r.latencies, done.Sub(start))
	case errors.Is(err, context.DeadlineExceeded):
		r.timeouts++
	default:
		r.errors++
		if r.firstErr == nil {
			r.firstErr = err
		}
	}
}

func (r *recorder) fill(s *sample, measured time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Ops = len(r.latencies)
	s.OpsPerSec = float64(s.Ops) / measured.Seconds()
	s.P50Us, s.P99Us = percentiles(r.latencies)
	s.Latency = distribution(r.latencies)
	s.Timeouts, s.Errors = r.timeouts, r.errors
	if r.firstErr != nil {
		s.FirstError = r.firstErr.Error()
	}
}

// percentiles returns the median and 99th percentile of ds, in
// microseconds (0 for none). It sorts ds.
func percentiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return quantileOf(ds, 0.5), quantileOf(ds, 0.99)
}

// keyOf names key number i.
func keyOf(i int) []byte { return fmt.Appendf(nil, "key-%08d", i) }

// runPoint measures one point of workload w against a running cluster
// through cl: clients closed-loop callers, or w.rate writes per second.
// It runs for t.warmup and then t.duration, which it measures; then it
// starts no more writes and waits for those in flight, each for up to
// t.callTimeout.
func runPoint(ctx context.Context, w workload, cl client, c *cluster, clients int, t timing) sample {
	s := sample{Workload: w.name, Size: w.size, Clients: clients, Rate: w.rate}
	start := time.Now()
	r := &recorder{measureFrom: start.Add(t.warmup), end: start.Add(t.warmup + t.duration)}
	// Writes start until the end of the point; each runs on under the
	// caller's ctx alone.
	callers := ctx
	ctx, cancel := context.WithDeadline(ctx, r.end)
	defer cancel()

	var wg sync.WaitGroup
	put := func(caller int, rng *rand.Rand, value []byte, due time.Time) {
		callCtx, cancelCall := context.WithTimeout(callers, t.callTimeout)
		err := cl.Put(callCtx, caller, keyOf(rng.IntN(w.keys)), value)
		cancelCall()
		if callers.Err() != nil {
			return // the run is over, not a failure
		}
		r.record(due, time.Now(), err)
	}
	if w.rate > 0 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(1, 0))
			value := make([]byte, w.size)
			interval := time.Duration(float64(time.Second) / w.rate)
			for i := 0; ; i++ {
				due := start.Add(time.Duration(i) * interval)
				if d := time.Until(due); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
				if ctx.Err() != nil {
					return
				}
				seed := rng.Uint64()
				wg.Go(func() { put(i, rand.New(rand.NewPCG(seed, 0)), value, due) })
			}
		})
	} else {
		for i := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), 1))
				value := make([]byte, w.size)
				for ctx.Err() == nil {
					put(i, rng, value, time.Now())
				}
			})
		}
	}
	var cpuFrom time.Duration
	select {
	case <-time.After(time.Until(r.measureFrom)):
		cpuFrom = c.cpu()
	case <-ctx.Done():
	}
	<-ctx.Done()
	cpuTo := c.cpu()
	wg.Wait()
	r.fill(&s, t.duration)
	s.CPUCores = (cpuTo - cpuFrom).Seconds() / t.duration.Seconds()
	return s
}
