package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

// TestMain makes the test binary serve as a replica process too: run
// re-executes its own executable, which under go test is this binary.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == replica.Command {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := runReplica(context.Background(), os.Args[2:], log); err != nil {
			log.Error("replica failed", "err", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickRun runs a short quick-mode benchmark of every system and
// checks the structure of what it prints and writes, not the speeds. It
// builds the replica programs of their own modules too, which takes
// minutes the first time.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters of replica processes")
	}
	dataDir, out := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{
		"-quick", "-duration", "500ms", "-warmup", "100ms",
		"-systems", systemNames(allSystems()),
		"-workloads", "a,c,d,e,f,g,m", "-big-clients", "1",
		"-dir", dataDir, "-out", out,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	// A replica that fails as its cluster stops is only logged, so that
	// it spoils no measurement; here it is a bug in that replica (raft's
	// once closed its log store under the running raft).
	if strings.Contains(stderr.String(), `msg="stopping the cluster"`) {
		t.Errorf("a cluster did not stop cleanly:\n%s", stderr.String())
	}

	for _, header := range []string{
		"(a) 64-byte writes at saturation",
		"(c) 64-byte durable writes at a fixed open-loop load",
		"(d) 1 MiB durable writes at saturation",
		"(e) the service as users run it",
		"(f) physical limits",
		"(g) the service at light load",
		"(m) multicast of one message to a group",
	} {
		if !strings.Contains(stdout.String(), header) {
			t.Errorf("no table %q in the output:\n%s", header, stdout.String())
		}
	}
	headers := 0
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "system" && strings.Contains(line, "ratio") {
			headers++
		}
	}
	if headers != 6 {
		t.Errorf("%d column headers, want 6, output:\n%s", headers, stdout.String())
	}

	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if res.Machine.CPUs < 1 || res.Settings.Reps != 1 {
		t.Errorf("machine %+v, settings %+v", res.Machine, res.Settings)
	}
	// The nosync systems run only workload a; the services (convoy-kv and
	// kv-local, with streams and with HTTP requests, etcd, and the shared
	// log) workloads e and g; the physical limits are two rows of their
	// own.
	want := []string{
		"a/convoy", "a/etcd", "a/raft", "a/dragonboat",
		"a/convoy-nosync", "a/etcd-nosync", "a/raft-nosync", "a/dragonboat-nosync",
		"c/convoy", "c/etcd", "c/raft", "c/dragonboat",
		"d/convoy", "d/etcd", "d/raft", "d/dragonboat",
		"e/convoy-kv", "e/convoy-kv-http", "e/etcd", "e/kv-local", "e/kv-local-http", "e/convoy-log",
		"f/pebble-3x", "f/fsync",
		"g/convoy-kv", "g/convoy-kv-http", "g/etcd", "g/kv-local", "g/kv-local-http", "g/convoy-log", "g/floor",
	}
	var got []string
	for _, s := range res.Summary {
		got = append(got, s.Workload+"/"+s.System)
		for _, x := range []float64{s.OpsPerSec, s.P50Us, s.P99Us, s.CPUCores} {
			if x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("%s/%s: a value out of range: %+v", s.Workload, s.System, s)
			}
		}
		switch {
		case s.Workload == "f":
		case s.Workload == "g":
			// Every service against the floor.
			if (s.Ratio == nil) != (s.System == "floor") {
				t.Errorf("g/%s: ratio %v", s.System, s.Ratio)
			}
		case s.System == "convoy" || s.System == "convoy-nosync" || s.System == "convoy-kv":
			if s.Ratio != nil {
				t.Errorf("%s/%s: a ratio to itself", s.Workload, s.System)
			}
			if s.Errors != 0 {
				t.Errorf("%s/%s: %d failed writes", s.Workload, s.System, s.Errors)
			}
		case s.Workload == "e" && s.Ratio == nil:
			t.Errorf("e/%s: no ratio to convoy-kv", s.System)
		}
		// Every replica process works throughout a point: /proc counts
		// its CPU time in 10 ms ticks.
		if s.Workload != "f" && runtime.GOOS == "linux" && s.CPUCores == 0 {
			t.Errorf("%s/%s: no CPU time recorded", s.Workload, s.System)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("summary rows %v, want %v", got, want)
	}
	if len(res.Samples) != len(want) {
		t.Errorf("%d samples, want %d (one per row at one repetition)", len(res.Samples), len(want))
	}
	for _, s := range res.Samples {
		if (s.System == "convoy" || s.System == "convoy-kv") && s.FirstError != "" {
			t.Errorf("%s/%s: %s", s.Workload, s.System, s.FirstError)
		}
	}

	// Workload m: every algorithm at each group size of -quick.
	if len(res.Multicast) != 4*3 || len(res.MulticastSummary) != 4*3 {
		t.Errorf("%d multicast points, %d summary rows; want 12 of each", len(res.Multicast), len(res.MulticastSummary))
	}
	for _, r := range res.MulticastSummary {
		if r.Reps != 1 || r.Nodes < 2 || r.Nodes > 4 || r.Bytes != 2<<20 || !(r.Seconds > 0) || !(r.UnicastSeconds > 0) {
			t.Errorf("multicast row %+v", r)
		}
	}
	for _, name := range []string{"throughput-a", "latency-c", "multicast"} {
		for _, ext := range []string{".png", ".svg"} {
			checkImage(t, filepath.Join(out, name+ext))
		}
	}

	left, err := os.ReadDir(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("data directories left behind: %v", left)
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	p50, p99 := percentiles(ds)
	if p50 != 50 || p99 != 99 {
		t.Errorf("percentiles of 1..100µs: p50 %v, p99 %v; want 50, 99", p50, p99)
	}
	if p50, p99 := percentiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("percentiles of none: %v, %v", p50, p99)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
func TestDistribution(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	got := distribution(ds)
	if len(got) != len(latencyQuantiles) {
		t.Fatalf("%d quantiles, want %d", len(got), len(latencyQuantiles))
	}
	for i, q := range got {
		if want := math.Round(latencyQuantiles[i] * 1000); q.Q != latencyQuantiles[i] || q.Us != want {
			t.Errorf("quantile %d: %+v, want q %v at %vµs", i, q, latencyQuantiles[i], want)
		}
	}
	if got := distribution(nil); got != nil {
		t.Errorf("distribution of none: %v", got)
	}
	var ten []time.Duration
	for i := 1; i <= 10; i++ {
		ten = append(ten, time.Duration(i)*time.Microsecond)
	}
	for q, want := range map[float64]float64{0: 1, 0.01: 1, 0.1: 1, 0.3: 3, 0.7: 7, 0.95: 10, 1: 10} {
		if got := quantileOf(ten, q); got != want {
			t.Errorf("quantile %v of 1..10µs: %v, want %v", q, got, want)
		}
	}
}
