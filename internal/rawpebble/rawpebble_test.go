package rawpebble

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// measurement is a case of TestRate or TestLatency: a measurement with
// ctx and c (in a Dir of its own).
type measurement struct {
	name string
	ctx  context.Context
	c    Config
	// err is in the error's message; "" means a measurement that must
	// succeed.
	err string
}

// runMeasurements runs each case through measure, which returns the
// measurement's results as a report's text (got), whether they are what
// a successful measurement returns (ok; want says what that is), and its
// error. It checks that each case fails with its error, or succeeds with
// ok results, and leaves nothing in its Dir.
func runMeasurements(t *testing.T, cases []measurement, want string, measure func(ctx context.Context, c Config) (got string, ok bool, err error)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Dir = t.TempDir()
			got, ok, err := measure(tc.ctx, tc.c)
			switch {
			case tc.err == "" && (err != nil || !ok):
				t.Errorf("%s; want %s", got, want)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("%s; want an error with %q", got, tc.err)
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

func TestRate(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []measurement{
		{"two instances", context.Background(), Config{Instances: 2, RecordBytes: 64, Batch: 10, Warmup: 10 * time.Millisecond, Duration: 50 * time.Millisecond}, ""},
		{"default batch", context.Background(), Config{Instances: 1, RecordBytes: 8, Duration: 20 * time.Millisecond}, ""},
		// Every sync takes longer than the whole interval: it still holds
		// one batch.
		{"interval shorter than a sync", context.Background(), Config{Instances: 2, RecordBytes: 64, Warmup: time.Nanosecond, Duration: time.Nanosecond}, ""},
		{"cancelled", cancelled, Config{Instances: 1, RecordBytes: 64, Duration: time.Second}, "ended before the measured interval"},
		{"no instances", context.Background(), Config{RecordBytes: 64, Duration: time.Second}, "bad config"},
		{"short records", context.Background(), Config{Instances: 1, RecordBytes: 7, Duration: time.Second}, "bad config"},
		{"no duration", context.Background(), Config{Instances: 1, RecordBytes: 64}, "bad config"},
	}
	runMeasurements(t, cases, "a positive rate", func(ctx context.Context, c Config) (string, bool, error) {
		rate, err := Rate(ctx, c)
		return fmt.Sprintf("Rate = %v, %v", rate, err), rate > 0, err
	})
}

func TestLatency(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []measurement{
		{"two instances", context.Background(), Config{Instances: 2, RecordBytes: 64, PerSecond: 500, Warmup: 10 * time.Millisecond, Duration: 100 * time.Millisecond}, ""},
		{"cancelled", cancelled, Config{Instances: 1, RecordBytes: 64, PerSecond: 100, Duration: time.Second}, "context canceled"},
		{"no rate", context.Background(), Config{Instances: 1, RecordBytes: 64, Duration: time.Second}, "bad config"},
		{"no instances", context.Background(), Config{RecordBytes: 64, PerSecond: 100, Duration: time.Second}, "bad config"},
		{"short records", context.Background(), Config{Instances: 1, RecordBytes: 7, PerSecond: 100, Duration: time.Second}, "bad config"},
	}
	runMeasurements(t, cases, "0 < p50 ≤ p99", func(ctx context.Context, c Config) (string, bool, error) {
		p50, p99, err := Latency(ctx, c)
		return fmt.Sprintf("Latency = %v, %v, %v", p50, p99, err), p50 > 0 && p99 >= p50, err
	})
}
