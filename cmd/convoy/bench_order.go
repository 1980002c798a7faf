package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/rawpebble"
	"github.com/convoy-gcs/convoy/ordering"
)

const orderUsage = `Usage:
  convoy bench order [flags]

Runs a group of -nodes members in this process, each with its own TCP
endpoint on 127.0.0.1, and has -senders of them multicast -size byte
messages, first in the delivery mode -mode and then, under the same load,
in unordered mode as the baseline. For each mode it prints:

  throughput  messages delivered per second, the lowest over the members,
              measured for -duration after -warmup (longer, up to
              -timeout, until every member delivered in the window) with
              every sender sending as fast as it can (or at -rate
              messages per second)
  latency     median and 99th percentile time from a sender's Send call to
              the delivery of that message on its own member, measured in
              a separate run at a moderate fixed rate (-rate if set, else
              2000 messages per second per sender)
  ratio       on the -mode line: its throughput over the baseline's

In unordered mode a member delivers its own messages as it sends them, so
the baseline's latency is that of the local path alone. Senders keep at
most -window of their messages undelivered at some member; 0 leaves only
the group's own flow control.

In durable mode (atomic delivery with a Pebble log per member, in
temporary directories) two lines follow with the disk's limits, measured
in the same run with one Pebble instance per member writing at once:
the throughput ceiling (records appended in synced batches of 1000, and
durable throughput over it), and the latency floor (one record per
synced write, each instance at the latency run's total message rate, and
durable p50 over its p50). A third line says where a message's time goes
on its sender: the members trace one message in 8 of each sender's in the
latency run, and it gives the medians of the time from when the member
sent one until it was ordered, until the member's own log had it on
disk, and until it was delivered.

Every run opens a fresh group and closes every member at its end. Members
check as they go that they deliver every sender's messages in the order
sent, without loss or duplication, and in atomic and total mode that they
all deliver the same sequence; any difference stops the benchmark with an
error.
`

// Defaults of the order benchmark.
const (
	// defaultLatencyRate is the latency phase's rate per sender without
	// -rate: far below what a small group sustains on loopback, so that
	// latency is measured without queueing behind a backlog.
	defaultLatencyRate = 2000
	// defaultOrderWindow is each sender's default window: enough messages
	// in flight to keep a small group busy, and well within the group's
	// own send queues.
	defaultOrderWindow = 4 << 10
	// orderHeaderBytes is the part of every message that identifies it:
	// the sender's id and the message's sequence number.
	orderHeaderBytes = 16
)

// orderBench is a parsed "convoy bench order" command line.
type orderBench struct {
	nodes   int
	senders int
	size    int
	mode    convoy.Mode
	// durable measures durable delivery (atomic mode with every member's
	// Pebble log), against unordered delivery and against raw Pebble.
	durable bool
	// duration is how long each phase measures, after warmup.
	duration time.Duration
	warmup   time.Duration
	// rate is the throughput phase's rate per sender, in messages per
	// second; 0 sends as fast as possible.
	rate int
	// window bounds each sender's messages not yet delivered by every
	// member; 0 leaves only the group's own flow control.
	window  uint64
	beacon  time.Duration
	timeout time.Duration
	json    bool
	verbose bool
	// cpuprofile, if set, is the file a CPU profile of the requested
	// mode's measured throughput window is written to.
	cpuprofile string
}

// orderResult is one output line.
type orderResult struct {
	Mode    string `json:"mode"`
	Nodes   int    `json:"nodes"`
	Senders int    `json:"senders"`
	Size    int    `json:"size"`
	// MsgsPerSec is the lowest, over the members, of the messages (from
	// every sender) delivered per second; BytesPerSec the same in payload
	// bytes.
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	// P50Us and P99Us are percentiles of the time from Send to delivery on
	// the sender's own member, in microseconds.
	P50Us float64 `json:"p50_us"`
	P99Us float64 `json:"p99_us"`
	// Ratio is MsgsPerSec over the unordered baseline's; only the line of
	// the requested mode has it.
	Ratio *float64 `json:"ratio,omitempty"`
	// Durable mode only: fsyncs per second per member (average over the
	// throughput phase), and the physical baseline measured in the same
	// run: one Pebble instance per member appending the same records in
	// synced batches, concurrently (the lowest rate of them), with
	// MsgsPerSec's ratio to it.
	FsyncsPerSec        *float64 `json:"fsyncs_per_sec,omitempty"`
	RawPebbleMsgsPerSec *float64 `json:"raw_pebble_msgs_per_sec,omitempty"`
	RawPebbleRatio      *float64 `json:"raw_pebble_ratio,omitempty"`
	// Durable mode only: the latency floor measured in the same run, the
	// percentiles of one synced write of a record, with one Pebble
	// instance per member each writing at the latency phase's message
	// rate, concurrently; and P50Us's ratio to its median.
	SyncedWriteP50Us *float64 `json:"synced_write_p50_us,omitempty"`
	SyncedWriteP99Us *float64 `json:"synced_write_p99_us,omitempty"`
	SyncedWriteRatio *float64 `json:"synced_write_ratio,omitempty"`
	// Durable mode only: where a message's time goes (see orderSteps).
	Steps *orderSteps `json:"steps,omitempty"`
}

// orderSteps is where the time of a durable message goes on its sender's
// member, from one message in stepsTraceEvery of each sender's sent
// while the latency phase was measured: the medians of the time from
// when its member's loop took it from Send and stamped it until it
// was ordered, until the member's own log had it on disk, and until it
// was delivered, in microseconds.
type orderSteps struct {
	Messages       int     `json:"messages"`
	OrderedP50Us   float64 `json:"ordered_p50_us"`
	PersistedP50Us float64 `json:"persisted_p50_us"`
	DeliveredP50Us float64 `json:"delivered_p50_us"`
}

func runBenchOrder(ctx context.Context, args []string, c *cli) error {
	b, err := parseOrderBench(args, c)
	if err != nil {
		return err
	}
	return b.run(ctx, c)
}

func parseOrderBench(args []string, c *cli) (*orderBench, error) {
	fs := newFlagSet("bench order", orderUsage, c)
	b := &orderBench{}
	fs.IntVar(&b.nodes, "nodes", 3, "members in the group, at least 2")
	senders := fs.String("senders", "all", `how many members send: "all" or a number from 1 to -nodes`)
	size := fs.String("size", "64", fmt.Sprintf("message size (bytes, or with a KiB, MiB or GiB suffix), at least %d", orderHeaderBytes))
	mode := fs.String("mode", "atomic", "delivery mode to measure: atomic, total, unordered or durable")
	fs.DurationVar(&b.duration, "duration", 10*time.Second, "how long each phase is measured")
	fs.DurationVar(&b.warmup, "warmup", time.Second, "how long each phase runs before it is measured")
	fs.IntVar(&b.rate, "rate", 0, "messages per second per sender in the throughput phase (0: as fast as possible) and in the latency phase (0: 2000)")
	fs.Uint64Var(&b.window, "window", defaultOrderWindow, "most messages a sender keeps undelivered at some member (0: no limit but the group's own)")
	fs.DurationVar(&b.beacon, "beacon", convoy.DefaultBeaconInterval, "beacon interval: the longest a member stays silent")
	fs.DurationVar(&b.timeout, "timeout", time.Minute, "give up when a phase has not delivered everything this long after its senders stopped")
	fs.BoolVar(&b.json, "json", false, "print one JSON object per line instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr")
	fs.StringVar(&b.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured window of -mode's throughput phase (every member runs in this process) to this file")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	var err error
	if *mode == "durable" {
		b.mode, b.durable = convoy.Atomic, true
	} else if b.mode, err = ordering.ParseMode(*mode); err != nil {
		return nil, usagef("-mode: %v", err)
	}
	if b.nodes < 2 {
		return nil, usagef("-nodes: groups need at least 2 members")
	}
	if b.senders, err = parseSenders(*senders, b.nodes); err != nil {
		return nil, usagef("-senders: %v", err)
	}
	if b.size, err = parseSize(*size); err != nil {
		return nil, usagef("-size: %v", err)
	}
	switch {
	case b.size < orderHeaderBytes:
		return nil, usagef("-size: at least %d bytes (a message carries its sender and sequence number)", orderHeaderBytes)
	case b.size > convoy.DefaultMaxMessageBytes:
		return nil, usagef("-size: at most %s", formatSize(convoy.DefaultMaxMessageBytes))
	case b.duration <= 0:
		return nil, usagef("-duration must be positive")
	case b.warmup < 0:
		return nil, usagef("-warmup must not be negative")
	case b.rate < 0:
		return nil, usagef("-rate must not be negative")
	case b.beacon <= 0:
		return nil, usagef("-beacon must be positive")
	case b.timeout <= 0:
		return nil, usagef("-timeout must be positive")
	}
	return b, nil
}

// parseSenders parses -senders: "all" or a count from 1 to nodes.
func parseSenders(s string, nodes int) (int, error) {
	if s == "all" {
		return nodes, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > nodes {
		return 0, fmt.Errorf(`%q: want "all" or a number from 1 to %d`, s, nodes)
	}
	return n, nil
}

// latencyRate is the latency phase's rate per sender.
func (b *orderBench) latencyRate() int {
	if b.rate > 0 {
		return b.rate
	}
	return defaultLatencyRate
}

// run measures the requested mode and the unordered baseline and prints
// a line for each, the requested mode first.
func (b *orderBench) run(ctx context.Context, c *cli) error {
	log := newLogger(c.stderr, b.verbose)
	modes := []convoy.Mode{b.mode}
	if b.mode != convoy.Unordered {
		modes = append(modes, convoy.Unordered)
	}
	var results []orderResult
	for _, mode := range modes {
		r, err := b.measure(ctx, mode, log)
		if err != nil {
			return fmt.Errorf("%v: %w", mode, err)
		}
		results = append(results, r)
	}
	base := results[len(results)-1].MsgsPerSec
	if base > 0 {
		ratio := round(results[0].MsgsPerSec/base, 4)
		results[0].Ratio = &ratio
	}
	if b.durable {
		// Each record carries a small header besides the message, as the
		// durable log's do.
		raw, err := rawpebble.Rate(ctx, rawpebble.Config{
			Instances:   b.nodes,
			RecordBytes: b.size + 32,
			Warmup:      b.warmup,
			Duration:    b.duration,
		})
		if err != nil {
			return fmt.Errorf("raw pebble baseline: %w", err)
		}
		raw = round(raw, 1)
		results[0].RawPebbleMsgsPerSec = &raw
		if raw > 0 {
			ratio := round(results[0].MsgsPerSec/raw, 4)
			results[0].RawPebbleRatio = &ratio
		}
		// Every member logs every message: each instance writes at the
		// latency phase's total rate.
		p50, p99, err := rawpebble.Latency(ctx, rawpebble.Config{
			Instances:   b.nodes,
			RecordBytes: b.size + 32,
			PerSecond:   b.latencyRate() * b.senders,
			Warmup:      b.warmup,
			Duration:    b.duration,
		})
		if err != nil {
			return fmt.Errorf("synced write baseline: %w", err)
		}
		p50us, p99us := micros(p50), micros(p99)
		results[0].SyncedWriteP50Us, results[0].SyncedWriteP99Us = &p50us, &p99us
		if p50 > 0 {
			ratio := round(results[0].P50Us/p50us, 4)
			results[0].SyncedWriteRatio = &ratio
		}
	}
	if !b.json {
		b.printHeader(c.stdout)
	}
	for _, r := range results {
		if err := b.print(c.stdout, r); err != nil {
			return err
		}
	}
	return nil
}

// measure runs the throughput phase and then the latency phase of one
// mode, each on a fresh group.
func (b *orderBench) measure(ctx context.Context, mode convoy.Mode, log *slog.Logger) (orderResult, error) {
	durable := b.durable && mode == b.mode
	tput, err := b.phase(ctx, phaseSpec{name: "throughput", mode: mode, rate: b.rate, durable: durable, profile: mode == b.mode}, log)
	if err != nil {
		return orderResult{}, err
	}
	lat, err := b.phase(ctx, phaseSpec{name: "latency", mode: mode, rate: b.latencyRate(), latency: true, durable: durable}, log)
	if err != nil {
		return orderResult{}, err
	}
	offered := float64(b.latencyRate() * b.senders)
	if lat.msgsPerSec < 0.9*offered {
		log.Warn("the latency phase did not keep up with its rate; latencies include queueing",
			"mode", mode, "offered_msgs_per_sec", offered, "delivered_msgs_per_sec", math.Round(lat.msgsPerSec))
	}
	p50, p99 := percentile(lat.latencies, 0.50), percentile(lat.latencies, 0.99)
	log.Debug("measured", "mode", mode, "msgs_per_sec", tput.msgsPerSec, "latency_samples", len(lat.latencies), "p50", p50, "p99", p99)
	msgs := round(tput.msgsPerSec, 1)
	var steps *orderSteps
	if lat.steps != nil {
		steps = lat.steps.summary()
	}
	name := mode.String()
	var fsyncs *float64
	if durable {
		name = "durable"
		f := round(tput.fsyncsPerSec, 1)
		fsyncs = &f
	}
	return orderResult{
		FsyncsPerSec: fsyncs,
		Mode:         name,
		Nodes:        b.nodes,
		Senders:      b.senders,
		Size:         b.size,
		MsgsPerSec:   msgs,
		BytesPerSec:  round(msgs*float64(b.size), 0),
		P50Us:        micros(p50),
		P99Us:        micros(p99),
		Steps:        steps,
	}, nil
}

func (b *orderBench) printHeader(w io.Writer) {
	load := "as fast as possible"
	if b.rate > 0 {
		load = fmt.Sprintf("at %d msgs/s per sender", b.rate)
	}
	fmt.Fprintf(w, "# %d nodes (%d sending), %s messages; throughput %s over %v, latency at %d msgs/s per sender; loopback TCP, one process\n",
		b.nodes, b.senders, formatSize(b.size), load, b.duration, b.latencyRate())
	fmt.Fprintf(w, "%-10s %12s %10s %10s %10s %7s\n", "mode", "msgs/s", "MB/s", "p50 µs", "p99 µs", "ratio")
}

func (b *orderBench) print(w io.Writer, r orderResult) error {
	if b.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	ratio := "-"
	if r.Ratio != nil {
		ratio = strconv.FormatFloat(*r.Ratio, 'f', 2, 64)
	}
	_, err := fmt.Fprintf(w, "%-10s %12.0f %10.2f %10.1f %10.1f %7s\n",
		r.Mode, r.MsgsPerSec, r.BytesPerSec/1e6, r.P50Us, r.P99Us, ratio)
	if err == nil && r.RawPebbleMsgsPerSec != nil {
		_, err = fmt.Fprintf(w, "# durable: %.0f fsyncs/s per member; raw Pebble, one instance per member, synced batches of %d: %.0f msgs/s; durable/raw %.2f\n",
			*r.FsyncsPerSec, rawpebble.DefaultBatch, *r.RawPebbleMsgsPerSec, *r.RawPebbleRatio)
	}
	if err == nil && r.SyncedWriteP50Us != nil {
		ratio := "-"
		if r.SyncedWriteRatio != nil {
			ratio = strconv.FormatFloat(*r.SyncedWriteRatio, 'f', 2, 64)
		}
		_, err = fmt.Fprintf(w, "# durable: one synced write of a record, one Pebble instance per member at %d writes/s: p50 %.1f µs, p99 %.1f µs; durable p50 / synced write p50 %s\n",
			b.latencyRate()*b.senders, *r.SyncedWriteP50Us, *r.SyncedWriteP99Us, ratio)
	}
	if err == nil && r.Steps != nil {
		_, err = fmt.Fprintf(w, "# durable: where the time goes, p50 from the send on the sender (%d messages, one in %d): ordered %.1f µs, on its own disk %.1f µs, delivered %.1f µs\n",
			r.Steps.Messages, stepsTraceEvery, r.Steps.OrderedP50Us, r.Steps.PersistedP50Us, r.Steps.DeliveredP50Us)
	}
	return err
}

// micros returns d in microseconds, rounded to one decimal place.
func micros(d time.Duration) float64 {
	return round(float64(d)/float64(time.Microsecond), 1)
}

// round rounds x to the given number of decimal places.
func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}
