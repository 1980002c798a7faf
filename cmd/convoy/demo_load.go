package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	logclient "github.com/convoy-gcs/convoy/examples/log/client"
	kvclient "github.com/convoy-gcs/convoy/examples/paxos/client"
)

// Sizes and bounds of the demo's workload.
const (
	// demoValueBytes and demoEntryBytes are the sizes of a value put into
	// the store and of an entry appended to the log.
	demoValueBytes = 100
	demoEntryBytes = 200
	// demoOpTimeout bounds one operation, failovers and retries included.
	demoOpTimeout = 30 * time.Second
	// demoErrorPause is how long a client waits after an operation failed.
	demoErrorPause = 50 * time.Millisecond
)

// ack is one acknowledged write: a key and the value put there, or a log
// position and the entry appended there.
type ack struct {
	key  string
	pos  uint64
	data []byte
}

// loadStats is what one client (or, summed, the workload) did.
type loadStats struct {
	acks    []ack
	latency []time.Duration
	// failed counts operations that ended in an error: their writes may
	// or may not have taken effect, and are not checked.
	failed int
}

// workload runs the demo's clients: clients per service, each writing in
// a loop until stop is closed.
type workload struct {
	clients int
	api     apiClient
	log     *slog.Logger
	stop    chan struct{}
	wg      sync.WaitGroup
	// done counts acknowledged operations per service, for the progress
	// lines.
	kvDone, logDone atomic.Int64

	mu struct {
		sync.Mutex
		kv, log loadStats
	}
}

func newWorkload(clients int, api apiClient, log *slog.Logger) *workload {
	return &workload{clients: clients, api: api, log: log, stop: make(chan struct{})}
}

// start starts the clients of both services: kvURLs and logURLs are the
// members' base URLs; each client tries them from a different one.
func (w *workload) start(ctx context.Context, kvURLs, logURLs []string) {
	for i := range w.clients {
		kc := w.api.kv(rotate(kvURLs, i))
		w.wg.Go(func() { w.runKV(ctx, i, kc) })
		lc := w.api.log(rotate(logURLs, i))
		w.wg.Go(func() { w.runLog(ctx, i, lc) })
	}
}

// finish stops the clients, waits for their last operations, and returns
// what they did.
func (w *workload) finish() (kv, log loadStats) {
	close(w.stop)
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.kv, w.mu.log
}

// stopped reports whether the clients must stop.
func (w *workload) stopped(ctx context.Context) bool {
	select {
	case <-w.stop:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// runKV puts fresh keys, each with its own value, until stopped.
func (w *workload) runKV(ctx context.Context, client int, c *kvclient.Client) {
	var st loadStats
	for seq := 0; !w.stopped(ctx); seq++ {
		key := fmt.Sprintf("c%d-%06d", client, seq)
		value := demoPayload(appKV, key, demoValueBytes)
		octx, cancel := context.WithTimeout(ctx, demoOpTimeout)
		t0 := time.Now()
		_, err := c.Put(octx, key, value)
		d := time.Since(t0)
		cancel()
		if err != nil {
			st.failed++
			w.log.Debug("put failed", "key", key, "err", err)
			w.pause(ctx)
			continue
		}
		st.acks = append(st.acks, ack{key: key, data: value})
		st.latency = append(st.latency, d)
		w.kvDone.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.kv = merge(w.mu.kv, st)
}

// runLog appends entries until stopped.
func (w *workload) runLog(ctx context.Context, client int, c *logclient.Client) {
	var st loadStats
	for seq := 0; !w.stopped(ctx); seq++ {
		data := demoPayload(appLog, fmt.Sprintf("c%d-%06d", client, seq), demoEntryBytes)
		octx, cancel := context.WithTimeout(ctx, demoOpTimeout)
		t0 := time.Now()
		pos, err := c.Append(octx, data)
		d := time.Since(t0)
		cancel()
		if err != nil {
			st.failed++
			w.log.Debug("append failed", "client", client, "seq", seq, "err", err)
			w.pause(ctx)
			continue
		}
		st.acks = append(st.acks, ack{pos: pos, data: data})
		st.latency = append(st.latency, d)
		w.logDone.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mu.log = merge(w.mu.log, st)
}

// pause waits a little after a failed operation.
func (w *workload) pause(ctx context.Context) {
	t := time.NewTimer(demoErrorPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.stop:
	case <-ctx.Done():
	}
}

func merge(a, b loadStats) loadStats {
	return loadStats{
		acks:    append(a.acks, b.acks...),
		latency: append(a.latency, b.latency...),
		failed:  a.failed + b.failed,
	}
}

// demoPayload returns size bytes that name what they are written for
// (app and name) and then fill up with a pattern seeded by both, so that
// a value read back in the wrong place, or changed, shows.
func demoPayload(app, name string, size int) []byte {
	b := make([]byte, size)
	h := fnv.New64a()
	h.Write([]byte(app + "/" + name))
	fillPattern(b, h.Sum64())
	copy(b, app+"/"+name+" ")
	return b
}

// rotate returns urls starting at the i-th (modulo their number).
func rotate(urls []string, i int) []string {
	i %= len(urls)
	return append(slices.Clone(urls[i:]), urls[:i]...)
}
