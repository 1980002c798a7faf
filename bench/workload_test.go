package main

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// scriptedClient answers each write after latency(caller), or fails it
// when its context ends first.
type scriptedClient struct {
	latency func(caller int) time.Duration
}

func (c scriptedClient) Put(ctx context.Context, caller int, _, _ []byte) error {
	select {
	case <-time.After(c.latency(caller)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (scriptedClient) Close() error { return nil }

// TestRunPointCountsWritesInFlight: a point counts every write that
// started (or was due) in its measured interval, those still in flight
// when it ends included, with their whole latency or as timeouts: a
// system that falls behind at the end of a point cannot hide it.
func TestRunPointCountsWritesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		w       workload
		clients int
		latency func(caller int) time.Duration
		timing  timing
		// want*: the sample's counts; minP99 bounds its p99 from below.
		wantOps, wantTimeouts int
		minP99                time.Duration
	}{{
		// 100 writes per second, due at 10 ms steps; measured from 1 s to
		// 3 s: writes 100 to 299. Every 50th hangs past the 1 s bound:
		// 149, 199, 249 and 299, the last two still in flight at 3 s.
		name: "open loop, timeouts", w: workload{name: "c", size: 8, keys: 10, rate: 100},
		latency: func(i int) time.Duration {
			if i%50 == 49 {
				return time.Hour
			}
			return 10 * time.Millisecond
		},
		timing:  timing{warmup: time.Second, duration: 2 * time.Second, callTimeout: time.Second},
		wantOps: 196, wantTimeouts: 4, minP99: 10 * time.Millisecond,
	}, {
		// The same with slow writes of 500 ms, under the bound: the last
		// ones complete after the end and count with their latency.
		name: "open loop, slow", w: workload{name: "c", size: 8, keys: 10, rate: 100},
		latency: func(i int) time.Duration {
			if i%25 == 24 {
				return 500 * time.Millisecond
			}
			return 10 * time.Millisecond
		},
		timing:  timing{warmup: time.Second, duration: 2 * time.Second, callTimeout: time.Second},
		wantOps: 200, minP99: 500 * time.Millisecond,
	}, {
		// Two closed-loop clients whose writes take 300 ms, measured for
		// 1 s from the start: each starts writes at 0, 0.3, 0.6 and 0.9 s,
		// the last ending after the point.
		name: "closed loop", w: workload{name: "a", size: 8, keys: 10}, clients: 2,
		latency: func(int) time.Duration { return 300 * time.Millisecond },
		timing:  timing{duration: time.Second, callTimeout: time.Second},
		wantOps: 8, minP99: 300 * time.Millisecond,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := runPoint(t.Context(), tc.w, scriptedClient{tc.latency}, &cluster{}, tc.clients, tc.timing)
				if s.Ops != tc.wantOps || s.Timeouts != tc.wantTimeouts || s.Errors != 0 {
					t.Errorf("ops %d, timeouts %d, errors %d (%s); want %d, %d, 0", s.Ops, s.Timeouts, s.Errors, s.FirstError, tc.wantOps, tc.wantTimeouts)
				}
				if p99 := time.Duration(s.P99Us * float64(time.Microsecond)); p99 < tc.minP99 {
					t.Errorf("p99 %v, want at least %v", p99, tc.minP99)
				}
				if want := float64(tc.wantOps) / tc.timing.duration.Seconds(); s.OpsPerSec != want {
					t.Errorf("%v ops/s, want %v", s.OpsPerSec, want)
				}
			})
		})
	}
}
