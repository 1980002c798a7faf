package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy"
)

// phaseSpec describes one measured run of the order benchmark.
type phaseSpec struct {
	name string
	mode convoy.Mode
	// rate is each sender's rate in messages per second; 0 sends as fast
	// as Send accepts.
	rate int
	// latency makes senders time their own messages.
	latency bool
	// durable gives every member a durable log in a temporary directory.
	durable bool
	// profile makes the measured window the one -cpuprofile covers.
	profile bool
}

// phaseResult is what one phase measured.
type phaseResult struct {
	// msgsPerSec is the lowest, over the members, of deliveries per second
	// while the phase was measured.
	msgsPerSec float64
	// latencies are the Send-to-delivery times of the senders' messages
	// sent while the phase was measured, if it timed them.
	latencies []time.Duration
	// fsyncsPerSec is, in durable runs, the members' average fsyncs per
	// second over the whole phase.
	fsyncsPerSec float64
	// steps holds, in a durable latency phase, the steps of the sampled
	// messages sent while the phase was measured; nil otherwise.
	steps *messageSteps
}

// phase runs one phase on a fresh group: the senders send for warmup and
// then for duration, which is measured; then they stop, every member
// delivers what was sent, the group is closed, and the deliveries are
// checked.
func (b *orderBench) phase(ctx context.Context, s phaseSpec, log *slog.Logger) (phaseResult, error) {
	fail := func(err error) (phaseResult, error) {
		return phaseResult{}, fmt.Errorf("%s phase: %w", s.name, err)
	}
	// Collect the previous phase's garbage now rather than while this
	// one is measured.
	runtime.GC()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var dir string
	if s.durable {
		var err error
		if dir, err = os.MkdirTemp("", "convoy-bench-durable-"); err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
	}
	// A durable latency phase follows sampled messages through their
	// steps, to show where their time goes.
	var steps *messageSteps
	if s.durable && s.latency {
		steps = &messageSteps{}
	}
	c, err := openOrderCluster(ctx, cancel, orderClusterOptions{
		nodes:      b.nodes,
		senders:    b.senders,
		mode:       s.mode,
		beacon:     b.beacon,
		latency:    s.latency,
		durableDir: dir,
		steps:      steps,
	}, log)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = c.close(b.timeout) }()

	measureFrom := time.Since(c.start) + b.warmup
	stop := make(chan struct{})
	sent := make([]uint64, b.nodes)
	var wg sync.WaitGroup
	for _, m := range c.members[:b.senders] {
		wg.Go(func() {
			n, err := c.send(ctx, m, stop, s.rate, b.window, b.size, measureFrom)
			sent[m.rank] = n
			if err != nil {
				c.fail(fmt.Errorf("member %d: %w", m.id, err))
			}
		})
	}
	sendersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(sendersDone)
	}()
	// stopSenders stops the senders and waits for them. A Send that does
	// not return (the group stalled) fails the phase, which ends its
	// context and so the Send.
	stopSenders := sync.OnceFunc(func() {
		close(stop)
		t := time.NewTimer(b.timeout)
		defer t.Stop()
		select {
		case <-sendersDone:
			return
		case <-t.C:
			c.fail(fmt.Errorf("a Send has not returned %v after the senders were told to stop; members delivered %v", b.timeout, c.delivered()))
		}
		<-sendersDone
	})
	defer stopSenders()

	if err := c.sleep(ctx, measureFrom-time.Since(c.start)); err != nil {
		return fail(err)
	}
	stopProfile, err := b.startProfile(s)
	if err != nil {
		return fail(err)
	}
	t0, before := time.Now(), c.delivered()
	if steps != nil {
		steps.since.Store(t0.UnixNano())
	}
	err = c.sleep(ctx, b.duration)
	after, elapsed := c.delivered(), time.Since(t0)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return fail(err)
	}
	// The window lasts until every member has delivered in it too (up to
	// -timeout): a member starved for the whole of a short window (a
	// loaded machine) would otherwise report no throughput at all.
	for stalled := time.Now().Add(b.timeout); slices.ContainsFunc(diff(after, before), func(d uint64) bool { return d == 0 }) && time.Now().Before(stalled); {
		if err := c.sleep(ctx, 10*time.Millisecond); err != nil {
			return fail(err)
		}
		after, elapsed = c.delivered(), time.Since(t0)
	}
	stopSenders()
	select {
	case <-c.failed:
		return fail(c.err)
	default:
	}

	var total uint64
	for _, n := range sent {
		total += n
	}
	if err := c.drain(ctx, total, b.timeout); err != nil {
		return fail(err)
	}
	if err := c.close(b.timeout); err != nil {
		return fail(err)
	}
	select {
	case <-c.failed:
		return fail(c.err)
	default:
	}
	if err := c.verify(sent); err != nil {
		return fail(err)
	}

	res := phaseResult{msgsPerSec: math.Inf(1), steps: steps}
	if s.durable {
		res.fsyncsPerSec = c.fsyncs(ctx) / time.Since(c.start).Seconds()
	}
	for i := range after {
		res.msgsPerSec = min(res.msgsPerSec, float64(after[i]-before[i])/elapsed.Seconds())
	}
	for _, m := range c.members {
		if m.lat != nil {
			res.latencies = append(res.latencies, m.lat.samples...)
		}
	}
	log.Debug("phase", "phase", s.name, "mode", s.mode, "sent", sent, "measured_deliveries", diff(after, before),
		"seconds", elapsed.Seconds(), "msgs_per_sec", res.msgsPerSec, "latency_samples", len(res.latencies))
	return res, nil
}

// diff returns a[i] - b[i] for every i.
func diff(a, b []uint64) []uint64 {
	out := make([]uint64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

// sleep waits for d, or until the phase fails or ctx ends.
func (c *orderCluster) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.failed:
		return c.err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// send is the sender loop of member m: it sends size-byte messages, at
// rate per second (or as fast as Send accepts them if rate is 0), until
// stop is closed, and returns how many it sent. With a window, it keeps at
// most that many of its messages undelivered at some member. Messages
// whose Send begins at measureFrom (since the phase start) or later are
// timed, if m times its messages.
//
// The rate is kept open-loop: message k is due k/rate after the first,
// whatever happened to the earlier ones, so a slow Send is followed by
// sends in quick succession rather than by a lower rate. (Go timers on an
// idle Linux process wake at millisecond granularity, so above 1000
// messages per second they leave in small bursts at the same average.)
func (c *orderCluster) send(ctx context.Context, m *orderMember, stop <-chan struct{}, rate int, window uint64, size int, measureFrom time.Duration) (uint64, error) {
	var interval time.Duration
	if rate > 0 {
		interval = time.Second / time.Duration(rate)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := time.Now()
	var sent uint64
	for {
		if interval > 0 {
			if wait := time.Until(next); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-stop:
					return sent, nil
				}
			}
			next = next.Add(interval)
		}
		select {
		case <-stop:
			return sent, nil
		default:
		}
		seq := sent + 1
		if !c.awaitWindow(ctx, m, seq, window, stop) {
			return sent, nil
		}
		p := make([]byte, size)
		encodeOrderHeader(p, m.id, seq)
		if m.lat != nil {
			at := time.Since(c.start)
			m.lat.sending(seq, at, at >= measureFrom)
		}
		if _, err := m.g.Send(ctx, p); err != nil {
			return sent, fmt.Errorf("send of message %d: %w", seq, err)
		}
		sent = seq
	}
}

// latencyLog times one member's own messages from Send to their delivery
// on that member. Its methods are safe for concurrent use; read samples
// only once the group is closed.
type latencyLog struct {
	mu sync.Mutex
	// pending are the messages sent and not yet delivered: pending[i] is
	// message base+i. A member delivers its own messages in the order sent.
	pending []sendTime
	base    uint64
	// samples are the latencies of delivered messages that were measured.
	samples []time.Duration
}

type sendTime struct {
	at       time.Duration // since the phase start
	measured bool
}

// sending records that message seq is handed to Send at time at.
func (l *latencyLog) sending(seq uint64, at time.Duration, measured bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) == 0 {
		l.base = seq
	}
	l.pending = append(l.pending, sendTime{at: at, measured: measured})
}

// delivered records that message seq was delivered at time at.
func (l *latencyLog) delivered(seq uint64, at time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq < l.base || seq-l.base >= uint64(len(l.pending)) {
		return // not recorded as sent: the handler has caught any disorder
	}
	i := seq - l.base
	st := l.pending[i]
	l.pending = l.pending[i+1:]
	l.base = seq + 1
	if st.measured {
		l.samples = append(l.samples, at-st.at)
	}
}

// percentile returns the q-quantile (0 < q ≤ 1) of ds by the nearest-rank
// method, or 0 if ds is empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// startProfile starts the CPU profile -cpuprofile asks for if s is the
// phase it covers, and returns the function that stops and writes it.
func (b *orderBench) startProfile(s phaseSpec) (stop func() error, err error) {
	if b.cpuprofile == "" || !s.profile {
		return func() error { return nil }, nil
	}
	f, err := os.Create(b.cpuprofile)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
