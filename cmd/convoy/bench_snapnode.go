package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy"
)

const snapnodeUsage = `Usage:
  convoy bench snapnode -id N -etcd URL,... -prefix P -initial N -state SIZE -data DIR

Runs one durable member for "convoy bench snapshot", which starts these
itself. The member's state is -state bytes of the synthetic stream of
"convoy bench join". It founds the group (with -initial others) or joins
it, sends a small message every 50ms, and prints JSON lines on stdout, each with the
memory it used since its peaks were last reset: ready once Open returned
(its peaks reset as it started), restored when Restore returned. It takes
commands on stdin, one per line:

  snapshot   reset the peaks, take Group.Snapshot, print snapshot
  peak       print peak, then reset the peaks

and runs until its stdin ends.
`

// snapTick is how often a snapnode sends a message.
const snapTick = 50 * time.Millisecond

// runBenchSnapNode is "convoy bench snapnode".
func runBenchSnapNode(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench snapnode", snapnodeUsage, c)
	id := fs.Uint64("id", 0, "this member's id")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on, host:port")
	endpoints := fs.String("etcd", "", "etcd endpoints, comma-separated")
	prefix := fs.String("prefix", "", "etcd key prefix of the group")
	initial := fs.Int("initial", 1, "members that found the group")
	stateFlag := fs.String("state", "256MiB", "state size (bytes, or with a KiB, MiB or GiB suffix)")
	data := fs.String("data", "", "the durable log's directory")
	heartbeat := fs.Duration("heartbeat", convoy.DefaultHeartbeatInterval, "failure detector heartbeat interval")
	timeout := fs.Duration("timeout", time.Minute, "failure detector suspect timeout")
	verbose := fs.Bool("v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	size, err := parseSize(*stateFlag)
	switch {
	case err != nil:
		return usagef("bench snapnode: -state: %v", err)
	case *id == 0 || *endpoints == "" || *prefix == "" || *data == "":
		return usagef("bench snapnode: -id, -etcd, -prefix and -data are required")
	}
	log := newLogger(c.stderr, *verbose).With("node", *id)
	enc := newSnapEventWriter(c, *id, log)
	mem := newMemWatch()
	defer mem.stop()

	state := newSynthState(int64(size))
	state.onRestore = func(start, end time.Time, n int64, err error) {
		ev := snapEvent{Event: snRestored, T: end.UnixNano(), Bytes: n, Seconds: end.Sub(start).Seconds()}
		if err != nil {
			ev.Err = err.Error()
		}
		enc(ev)
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelDebug
	}
	cfg := convoy.Config{
		Self:              convoy.NodeID(*id),
		Etcd:              &convoy.EtcdConfig{Endpoints: strings.Split(*endpoints, ","), Prefix: *prefix},
		ListenAddr:        *listen,
		InitialMembers:    *initial,
		HeartbeatInterval: *heartbeat,
		SuspectTimeout:    *timeout,
		Mode:              convoy.Atomic,
		State:             state,
		Durable:           &convoy.DurableConfig{Dir: *data},
		Logger:            slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level})),
	}
	// The commands come on stdin; its end ends the member.
	lines := make(chan string)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer cancel()
		sc := bufio.NewScanner(c.stdin)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	g, err := convoy.Open(ctx, cfg, func(convoy.Delivery) {})
	if err != nil {
		enc(snapEvent{Event: snError, T: time.Now().UnixNano(), Err: err.Error()})
		return fmt.Errorf("open member %d: %w", *id, err)
	}
	defer g.Close()
	enc(mem.event(snReady))
	mem.reset()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { tick(ctx, g, *id) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case line := <-lines:
			switch line {
			case "snapshot":
				mem.reset()
				idx, err := g.Snapshot(ctx)
				ev := mem.event(snSnapshot)
				ev.Index = idx
				if err != nil {
					ev.Err = err.Error()
				}
				enc(ev)
				mem.reset()
			case "peak":
				enc(mem.event(snPeak))
				mem.reset()
			default:
				enc(snapEvent{Event: snError, T: time.Now().UnixNano(), Err: fmt.Sprintf("unknown command %q", line)})
			}
		}
	}
}

// tick sends a small message every snapTick until ctx ends.
func tick(ctx context.Context, g *convoy.Group, id uint64) {
	t := time.NewTicker(snapTick)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Refused while the member joins, or during a view change: the
		// load only needs the indexes to advance.
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = g.Send(sctx, []byte("tick "+strconv.FormatUint(id, 10)+" "+strconv.Itoa(n)))
		cancel()
	}
}

// newSnapEventWriter returns a function that prints a node's events as
// JSON lines on c's stdout, safe for concurrent use.
func newSnapEventWriter(c *cli, node uint64, log *slog.Logger) func(snapEvent) {
	var mu sync.Mutex
	enc := json.NewEncoder(c.stdout)
	return func(ev snapEvent) {
		ev.Node = node
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(ev); err != nil {
			log.Warn("writing event", "err", err)
		}
	}
}

// memWatch follows the process's memory: its peak resident set (the
// kernel's VmHWM, which reset resets) and its peak Go heap, sampled.
type memWatch struct {
	start    atomic.Int64 // when the peaks were last reset, Unix nanoseconds
	rss      atomic.Int64 // the resident set then
	heap     atomic.Int64 // the Go heap then
	heapPeak atomic.Int64
	done     chan struct{}
	wg       sync.WaitGroup
}

// memSampleEvery is how often the Go heap is sampled.
const memSampleEvery = 2 * time.Millisecond

func newMemWatch() *memWatch {
	m := &memWatch{done: make(chan struct{})}
	m.reset()
	m.wg.Go(func() {
		t := time.NewTicker(memSampleEvery)
		defer t.Stop()
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
			}
			v := heapBytes()
			for {
				old := m.heapPeak.Load()
				if v <= old || m.heapPeak.CompareAndSwap(old, v) {
					break
				}
			}
		}
	})
	return m
}

func (m *memWatch) stop() {
	close(m.done)
	m.wg.Wait()
}

// reset starts the peaks over from now.
func (m *memWatch) reset() {
	// Writing 5 to clear_refs resets VmHWM to the current resident set
	// (Linux 4.0 and later).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	rss, _ := procStatus("VmRSS")
	m.start.Store(time.Now().UnixNano())
	m.rss.Store(rss)
	h := heapBytes()
	m.heap.Store(h)
	m.heapPeak.Store(h)
}

// heapBytes returns the bytes of the Go heap's objects, live or not yet
// swept.
func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// event returns an event of kind with the memory since the last reset.
func (m *memWatch) event(kind string) snapEvent {
	peak, err := procStatus("VmHWM")
	ev := snapEvent{Event: kind, T: time.Now().UnixNano(), Start: m.start.Load(), RSS: m.rss.Load(), RSSPeak: peak, Heap: m.heap.Load(), HeapPeak: m.heapPeak.Load()}
	if err != nil {
		ev.Err = err.Error()
	}
	return ev
}

// procStatus returns a field of /proc/self/status given in kB, in bytes.
func procStatus(field string) (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/self/status: %s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("/proc/self/status: no " + field)
}
