package rawpebble

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRate(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    Config
		// err is in the error's message; "" means a positive rate.
		err string
	}{
		{"two instances", context.Background(), Config{Instances: 2, RecordBytes: 64, Batch: 10, Warmup: 10 * time.Millisecond, Duration: 50 * time.Millisecond}, ""},
		{"default batch", context.Background(), Config{Instances: 1, RecordBytes: 8, Duration: 20 * time.Millisecond}, ""},
		// Every sync takes longer than the whole interval: it still holds
		// one batch.
		{"interval shorter than a sync", context.Background(), Config{Instances: 2, RecordBytes: 64, Warmup: time.Nanosecond, Duration: time.Nanosecond}, ""},
		{"cancelled", cancelled, Config{Instances: 1, RecordBytes: 64, Duration: time.Second}, "ended before the measured interval"},
		{"no instances", context.Background(), Config{RecordBytes: 64, Duration: time.Second}, "bad config"},
		{"short records", context.Background(), Config{Instances: 1, RecordBytes: 7, Duration: time.Second}, "bad config"},
		{"no duration", context.Background(), Config{Instances: 1, RecordBytes: 64}, "bad config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Dir = t.TempDir()
			rate, err := Rate(tc.ctx, tc.c)
			switch {
			case tc.err == "" && (err != nil || rate <= 0):
				t.Errorf("Rate = %v, %v; want a positive rate", rate, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Rate = %v, %v; want an error with %q", rate, err, tc.err)
			}
			left, err := os.ReadDir(tc.c.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("left behind in Dir: %v", left)
			}
		})
	}
}

func TestLatency(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		c    Config
		// err is in the error's message; "" means positive latencies.
		err string
	}{
		{"two instances", context.Background(), Config{Instances: 2, RecordBytes: 64, PerSecond: 500, Warmup: 10 * time.Millisecond, Duration: 100 * time.Millisecond}, ""},
		{"cancelled", cancelled, Config{Instances: 1, RecordBytes: 64, PerSecond: 100, Duration: time.Second}, "context canceled"},
		{"no rate", context.Background(), Config{Instances: 1, RecordBytes: 64, Duration: time.Second}, "bad config"},
		{"no instances", context.Background(), Config{RecordBytes: 64, PerSecond: 100, Duration: time.Second}, "bad config"},
		{"short records", context.Background(), Config{Instances: 1, RecordBytes: 7, PerSecond: 100, Duration: time.Second}, "bad config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Dir = t.TempDir()
			p50, p99, err := Latency(tc.ctx, tc.c)
			switch {
			case tc.err == "" && (err != nil || p50 <= 0 || p99 < p50):
				t.Errorf("Latency = %v, %v, %v; want 0 < p50 ≤ p99", p50, p99, err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Latency = %v, %v, %v; want an error with %q", p50, p99, err, tc.err)
			}
			left, err := os.ReadDir(tc.c.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("left behind in Dir: %v", left)
			}
		})
	}
}
