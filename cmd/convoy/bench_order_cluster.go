package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/rdma"
)

// openTimeout bounds opening a group: every member waits for the others'
// connections.
const openTimeout = 30 * time.Second

// orderCluster is one group of in-process members, open for one phase.
// Member i (from 0) has id i+1 and rank i.
type orderCluster struct {
	mode    convoy.Mode
	start   time.Time // phase start: the origin of latency timestamps
	members []*orderMember
	check   *orderCheck
	// gates[r] is where the sender of rank r waits for its window.
	gates []*sendGate

	// cancel ends the phase's context, which Sends run under.
	cancel   context.CancelCauseFunc
	failOnce sync.Once
	failed   chan struct{} // closed by fail
	err      error         // set once, before failed is closed

	closeOnce sync.Once
	closed    chan struct{} // closed once every member is closed
}

// orderMember is one member of an orderCluster.
type orderMember struct {
	rank int
	id   convoy.NodeID
	ep   rdma.Endpoint
	g    *convoy.Group
	// lat times this member's own messages; nil when it does not send or
	// latency is not measured.
	lat *latencyLog
	// fsyncs reads this member's metrics in durable runs (the durable
	// log's fsync counter); nil otherwise.
	fsyncs *sdkmetric.ManualReader
	// groupClosed is set once Close of g has returned.
	groupClosed atomic.Bool

	// delivered counts deliveries; the handler stores it after updating
	// the fields below, so a reader that sees a count sees them too.
	delivered atomic.Uint64
	// progress[r] counts the deliveries of messages from the member of
	// rank r.
	progress []atomic.Uint64

	// Written only by the handler, on the group's goroutine; read by
	// others once the group is closed.
	count uint64   // deliveries so far
	hash  uint64   // running hash of the delivered (sender, seq) sequence
	next  []uint64 // by sender rank: the sequence number due next
	bad   bool     // a delivery was wrong: stop checking
}

// orderClusterOptions configures the group openOrderCluster opens.
type orderClusterOptions struct {
	// nodes is how many members the group has.
	nodes int
	// senders is how many of them send: those of rank below senders.
	senders int
	// mode is the group's delivery mode.
	mode convoy.Mode
	// beacon is the members' beacon interval.
	beacon time.Duration
	// latency gives every sender a latency log, to time its own messages.
	latency bool
	// durableDir, if set, makes delivery durable: member i keeps its log
	// in a directory of its own under durableDir.
	durableDir string
	// steps, if set, is where every member traces one message in
	// stepsTraceEvery of each sender's.
	steps *messageSteps
}

// openOrderCluster opens the group o describes. A failure of the phase
// calls cancel with its error.
func openOrderCluster(ctx context.Context, cancel context.CancelCauseFunc, o orderClusterOptions, log *slog.Logger) (_ *orderCluster, err error) {
	c := &orderCluster{
		mode:   o.mode,
		start:  time.Now(),
		check:  newOrderCheck(o.nodes),
		cancel: cancel,
		failed: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close(openTimeout))
		}
	}()
	// The groups log only in verbose runs: a member that closes first
	// makes the others' groups fail, which they log as a warning. Real
	// failures surface as errors from Send or as missing deliveries.
	groupLog := slog.New(slog.DiscardHandler)
	if log.Enabled(ctx, slog.LevelDebug) {
		groupLog = log
	}
	book := &addrBook{}
	members := make([]convoy.Member, o.nodes)
	for i := range o.nodes {
		id := nodeID(i)
		ep, err := rdma.ListenTCP(rdma.TCPConfig{
			ID:         id,
			ListenAddr: "127.0.0.1:0",
			Resolve:    book.resolve,
			Logger:     log,
		})
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", id, err)
		}
		m := &orderMember{rank: i, id: id, ep: ep, next: make([]uint64, o.nodes), progress: make([]atomic.Uint64, o.nodes)}
		for s := range m.next {
			m.next[s] = 1
		}
		if o.latency && i < o.senders {
			m.lat = &latencyLog{}
		}
		c.members = append(c.members, m)
		c.gates = append(c.gates, &sendGate{wake: make(chan struct{}, 1)})
		book.set(id, ep.Addr().String())
		members[i] = convoy.Member{ID: id, Addr: ep.Addr().String()}
	}

	// The members share one TracerProvider, whose only processor is
	// steps: it starts no goroutine, and needs no shutdown.
	var tp *sdktrace.TracerProvider
	if o.steps != nil {
		tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.steps))
	}

	// Every member waits in Open for the others, so open them together.
	openCtx, cancelOpen := context.WithTimeout(ctx, openTimeout)
	defer cancelOpen()
	var wg sync.WaitGroup
	errs := make([]error, o.nodes)
	for i, m := range c.members {
		cfg := convoy.Config{
			Self:           m.id,
			Members:        members,
			Mode:           o.mode,
			Endpoint:       m.ep,
			BeaconInterval: o.beacon,
			Logger:         groupLog,
		}
		if o.steps != nil {
			cfg.TracerProvider, cfg.TraceMessages = tp, stepsTraceEvery
		}
		if o.durableDir != "" {
			cfg.Durable = &convoy.DurableConfig{Dir: filepath.Join(o.durableDir, fmt.Sprint(m.id))}
			m.fsyncs = sdkmetric.NewManualReader()
			cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.fsyncs))
		}
		wg.Go(func() {
			g, err := convoy.Open(openCtx, cfg, func(d convoy.Delivery) { c.deliver(m, d) })
			if err != nil {
				errs[i] = fmt.Errorf("open member %d: %w", m.id, err)
				return
			}
			m.g = g
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// fsyncs returns the members' fsyncs so far, on average, in durable runs.
func (c *orderCluster) fsyncs(ctx context.Context) float64 {
	var total, members float64
	for _, m := range c.members {
		if m.fsyncs == nil {
			continue
		}
		members++
		var rm metricdata.ResourceMetrics
		if err := m.fsyncs.Collect(ctx, &rm); err != nil {
			continue
		}
		for _, sm := range rm.ScopeMetrics {
			for _, mt := range sm.Metrics {
				if sum, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "convoy.persistence.fsyncs" {
					for _, dp := range sum.DataPoints {
						total += float64(dp.Value)
					}
				}
			}
		}
	}
	if members == 0 {
		return 0
	}
	return total / members
}

// fail records the phase's first error and ends it. It does not block.
func (c *orderCluster) fail(err error) {
	c.failOnce.Do(func() {
		c.err = err
		close(c.failed)
		c.cancel(err)
	})
}

// deliver is member m's handler.
func (c *orderCluster) deliver(m *orderMember, d convoy.Delivery) {
	if m.bad {
		return
	}
	var now time.Duration
	if m.lat != nil && d.Sender == m.id {
		now = time.Since(c.start)
	}
	if err := m.apply(d, c.mode != convoy.Unordered, c.check); err != nil {
		m.bad = true
		c.fail(fmt.Errorf("member %d, delivery %d: %w", m.id, m.count+1, err))
		return
	}
	if m.lat != nil && d.Sender == m.id {
		m.lat.delivered(d.Seq, now)
	}
	m.delivered.Store(m.count)
	rank := int(d.Sender) - 1
	m.progress[rank].Store(d.Seq)
	c.gates[rank].progressed(d.Seq)
}

// apply checks delivery d against what member m delivered before and
// folds it into m's count and hash; in ordered modes it compares the hash
// with the other members' at every checkpoint.
func (m *orderMember) apply(d convoy.Delivery, ordered bool, check *orderCheck) error {
	sender, seq, err := decodeOrderHeader(d.Payload)
	if err != nil {
		return err
	}
	rank := int(d.Sender) - 1
	switch {
	case sender != d.Sender || seq != d.Seq:
		return fmt.Errorf("message %d#%d carries the header of %d#%d", d.Sender, d.Seq, sender, seq)
	case rank < 0 || rank >= len(m.next):
		return fmt.Errorf("message from %d, not a member", d.Sender)
	case d.Seq != m.next[rank]:
		return fmt.Errorf("message %d#%d, but #%d was due from that sender (lost, duplicated or reordered)", d.Sender, d.Seq, m.next[rank])
	case d.Index != m.count+1:
		return fmt.Errorf("message %d#%d has index %d, want %d", d.Sender, d.Seq, d.Index, m.count+1)
	}
	m.next[rank]++
	m.count++
	m.hash = foldOrderHash(m.hash, d.Sender, d.Seq)
	if ordered && m.count%orderCheckEvery == 0 {
		return check.record(m.rank, m.count, m.hash)
	}
	return nil
}

// close closes every member's group, then every endpoint. It returns an
// error if that has not finished within timeout, leaving it to finish in
// the background: a group whose Close does not return is a bug the
// benchmark reports rather than waits out. It may be called more than
// once.
func (c *orderCluster) close(timeout time.Duration) error {
	c.closeOnce.Do(func() {
		c.closed = make(chan struct{})
		go func() {
			defer close(c.closed)
			for _, m := range c.members {
				if m.g != nil {
					_ = m.g.Close()
				}
				m.groupClosed.Store(true)
			}
			for _, m := range c.members {
				if m.ep != nil {
					_ = m.ep.Close()
				}
			}
		}()
	})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.closed:
		return nil
	case <-t.C:
		for _, m := range c.members {
			if !m.groupClosed.Load() {
				return fmt.Errorf("closing member %d has not finished after %v", m.id, timeout)
			}
		}
		return fmt.Errorf("closing the endpoints has not finished after %v", timeout)
	}
}

// delivered returns every member's delivery count.
func (c *orderCluster) delivered() []uint64 {
	out := make([]uint64, len(c.members))
	for i, m := range c.members {
		out[i] = m.delivered.Load()
	}
	return out
}

// drain waits until every member delivered total messages.
func (c *orderCluster) drain(ctx context.Context, total uint64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		done := true
		for _, m := range c.members {
			switch n := m.delivered.Load(); {
			case n > total:
				return fmt.Errorf("member %d delivered %d messages, only %d were sent", m.id, n, total)
			case n < total:
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-tick.C:
		case <-c.failed:
			return c.err
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-deadline.C:
			err := fmt.Errorf("%v after the senders stopped, members delivered %v of %d messages", timeout, c.delivered(), total)
			for _, m := range c.members {
				if gerr := m.g.Err(); gerr != nil {
					err = errors.Join(err, fmt.Errorf("member %d: %w", m.id, gerr))
				}
			}
			return err
		}
	}
}

// verify checks, once every group is closed, that every member delivered
// exactly what was sent (sent[r] messages from the member of rank r) and,
// in ordered modes, the same sequence.
func (c *orderCluster) verify(sent []uint64) error {
	var total uint64
	for _, n := range sent {
		total += n
	}
	first := c.members[0]
	for _, m := range c.members {
		if m.count != total {
			return fmt.Errorf("member %d delivered %d messages, %d were sent", m.id, m.count, total)
		}
		for r, n := range sent {
			if got := m.next[r] - 1; got != n {
				return fmt.Errorf("member %d delivered %d messages from member %d, which sent %d", m.id, got, r+1, n)
			}
		}
		if c.mode != convoy.Unordered && m.hash != first.hash {
			return fmt.Errorf("members %d and %d delivered the same %d messages in different orders", first.id, m.id, total)
		}
	}
	return nil
}

// encodeOrderHeader writes the sender's id and the message's sequence
// number at the start of p.
func encodeOrderHeader(p []byte, sender convoy.NodeID, seq uint64) {
	binary.BigEndian.PutUint64(p[0:8], uint64(sender))
	binary.BigEndian.PutUint64(p[8:16], seq)
}

func decodeOrderHeader(p []byte) (convoy.NodeID, uint64, error) {
	if len(p) < orderHeaderBytes {
		return 0, 0, fmt.Errorf("message of %d bytes, too short for its header", len(p))
	}
	return convoy.NodeID(binary.BigEndian.Uint64(p[0:8])), binary.BigEndian.Uint64(p[8:16]), nil
}

// foldOrderHash extends the running hash h of a delivery sequence by the
// message seq of sender.
func foldOrderHash(h uint64, sender convoy.NodeID, seq uint64) uint64 {
	return mix64(h ^ mix64(uint64(sender)<<48^seq))
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// orderCheckEvery is how many deliveries apart members compare their
// running hashes while a phase runs.
const orderCheckEvery = 1024

// orderCheck compares the members' running hashes at every checkpoint as
// the members pass it. Its methods are safe for concurrent use.
type orderCheck struct {
	members int
	mu      sync.Mutex
	// pending holds checkpoints some but not all members have passed,
	// by delivery count.
	pending map[uint64]*checkpoint
}

type checkpoint struct {
	hash  uint64
	first int // rank of the member that passed it first
	seen  int // members that passed it
}

func newOrderCheck(members int) *orderCheck {
	return &orderCheck{members: members, pending: make(map[uint64]*checkpoint)}
}

// record reports that member rank's running hash after n deliveries is
// hash, and returns an error if another member's differs.
func (oc *orderCheck) record(rank int, n, hash uint64) error {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	cp := oc.pending[n]
	if cp == nil {
		oc.pending[n] = &checkpoint{hash: hash, first: rank, seen: 1}
		return nil
	}
	if cp.hash != hash {
		return fmt.Errorf("the delivery sequence differs from member %d's within deliveries %d to %d",
			cp.first+1, n-orderCheckEvery+1, n)
	}
	if cp.seen++; cp.seen == oc.members {
		delete(oc.pending, n)
	}
	return nil
}

// sendGate is where a sender waits for room in its window: for every
// member to have delivered enough of its messages.
type sendGate struct {
	// target, when not 0, is the delivery count the waiting sender needs
	// from every member.
	target atomic.Uint64
	wake   chan struct{} // capacity 1
}

// progressed is called by a member's handler with its count of this
// sender's messages; it wakes the sender if it waits for that count.
func (s *sendGate) progressed(n uint64) {
	if t := s.target.Load(); t != 0 && n >= t {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// minProgress returns the lowest count, over the members, of messages
// delivered from the member of rank r.
func (c *orderCluster) minProgress(r int) uint64 {
	lo := uint64(math.MaxUint64)
	for _, m := range c.members {
		lo = min(lo, m.progress[r].Load())
	}
	return lo
}

// awaitWindow returns once message seq of member m fits in its window:
// once every member delivered all of m's messages but the last window.
// A sender that finds its window full waits until it is a quarter empty,
// so that it wakes once per batch rather than once per delivery. It
// returns false if stop is closed or ctx ends first.
func (c *orderCluster) awaitWindow(ctx context.Context, m *orderMember, seq, window uint64, stop <-chan struct{}) bool {
	if window == 0 || seq <= window || c.minProgress(m.rank) >= seq-window {
		return true
	}
	gate := c.gates[m.rank]
	target := seq - window + window/4
	defer gate.target.Store(0)
	for {
		gate.target.Store(target)
		if c.minProgress(m.rank) >= target {
			return true
		}
		select {
		case <-gate.wake:
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
