package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/internal/rdmacount"
	"github.com/convoy-gcs/convoy/rdma"
)

const pubsubUsage = `Usage:
  convoy bench pubsub [flags]

Runs a group of -nodes members, each with its own TCP endpoint (on
127.0.0.1, all in this process; with -netns, each a process in a network
namespace of its own behind a switch whose links are shaped to -rate
Mbit/s), with -topics atomic topics of -subscribers subscribers each
(topic i to members i*K .. i*K+K-1, modulo the group: every member
subscribes to about topics*K/nodes of them). Every member publishes -size
byte messages on the topics in turn, as fast as its window lets it (or at
-publish-rate messages per second); then, in the same group and under the
same load, it sends them to the whole group instead (Send), the baseline.
For each phase it prints, measured for -duration after -warmup:

  published   messages published per second, all members together
  delivered   deliveries per second, all members together
  sent/B      bytes a member's transport sent per byte published (the mean
              over the members, and the largest)
  recv/B      the same for bytes received
  p50, p99    time from a publication to its delivery at a subscriber, over
              every delivery (to within 1%)

and the ratio of the topics' bytes per published byte to the whole
group's, which multicast to topic subscribers only should bring near
subscribers/nodes. Bytes are those the members' transports carried
(messages, their headers, beacons and control records), without the
transport's own framing. Members check that every delivery is of a topic
they subscribe to. -netns needs root, ip and tc.
`

// pubsubBench is a parsed "convoy bench pubsub" command line.
type pubsubBench struct {
	nodes, topics, subscribers int
	size                       int
	duration, warmup           time.Duration
	rate                       int // messages per second per member
	window                     int
	netns                      bool
	linkMbit                   int
	json, verbose              bool
}

// pubsubResult is one output line: a phase.
type pubsubResult struct {
	Phase        string  `json:"phase"` // "topics" or "group"
	Nodes        int     `json:"nodes"`
	Topics       int     `json:"topics"`
	Subscribers  int     `json:"subscribers"`
	Bytes        int     `json:"bytes"`
	Published    float64 `json:"published_per_sec"`
	Delivered    float64 `json:"delivered_per_sec"`
	SentPerByte  float64 `json:"sent_per_byte"`
	MaxSentPer   float64 `json:"max_sent_per_byte"`
	RecvPerByte  float64 `json:"recv_per_byte"`
	MaxRecvPer   float64 `json:"max_recv_per_byte"`
	P50Millis    float64 `json:"p50_ms"`
	P99Millis    float64 `json:"p99_ms"`
	RatioToGroup float64 `json:"bytes_ratio_to_group,omitempty"`
	// LinkMbit is the links' rate with -netns (0: unshaped or loopback).
	LinkMbit int `json:"link_mbit,omitempty"`
}

func runBenchPubSub(ctx context.Context, args []string, c *cli) error {
	b, err := parsePubSubBench(args, c)
	if err != nil {
		return err
	}
	return b.run(ctx, c)
}

func parsePubSubBench(args []string, c *cli) (*pubsubBench, error) {
	fs := newFlagSet("bench pubsub", pubsubUsage, c)
	b := &pubsubBench{}
	size := fs.String("size", "1KiB", "message size (with a KiB or MiB suffix, or bytes); at least 16")
	fs.IntVar(&b.nodes, "nodes", 8, "members of the group")
	fs.IntVar(&b.topics, "topics", 8, "topics")
	fs.IntVar(&b.subscribers, "subscribers", 2, "subscribers of each topic")
	fs.DurationVar(&b.duration, "duration", 3*time.Second, "how long each phase measures")
	fs.DurationVar(&b.warmup, "warmup", time.Second, "how long each phase runs before it measures")
	fs.IntVar(&b.rate, "publish-rate", 0, "messages per second each member publishes; 0 as fast as its window lets it")
	fs.IntVar(&b.window, "window", 1024, "each member's messages undelivered (Config.WindowMessages)")
	fs.BoolVar(&b.netns, "netns", false, "run each member as a process in its own network namespace behind a shaped switch (root only)")
	fs.IntVar(&b.linkMbit, "rate", 1000, "with -netns: link rate in Mbit/s per direction per member; 0 leaves links unshaped")
	fs.BoolVar(&b.json, "json", false, "print one JSON object per line instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if b.size, err = parseSize(*size); err != nil {
		return nil, usagef("-size: %v", err)
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "rate" })
	switch {
	case b.nodes < 2:
		return nil, usagef("-nodes must be at least 2")
	case b.topics < 1 || b.topics > convoy.MaxTopics:
		return nil, usagef("-topics must be 1 to %d", convoy.MaxTopics)
	case b.subscribers < 1 || b.subscribers > b.nodes:
		return nil, usagef("-subscribers must be 1 to -nodes")
	case b.size < pubsubHeaderBytes:
		return nil, usagef("-size must be at least %d bytes", pubsubHeaderBytes)
	case b.duration <= 0 || b.warmup < 0:
		return nil, usagef("-duration must be positive and -warmup not negative")
	case b.rate < 0 || b.window < 1:
		return nil, usagef("-publish-rate must not be negative and -window positive")
	case b.linkMbit < 0:
		return nil, usagef("-rate must not be negative")
	case rateSet && !b.netns:
		return nil, usagef("-rate needs -netns")
	}
	if !b.netns {
		b.linkMbit = 0
	}
	return b, nil
}

// pubsubTopics returns the benchmark's topics: topic i to members i*K ..
// i*K+K-1, modulo the group.
func (b *pubsubBench) pubsubTopics() []convoy.Topic {
	var topics []convoy.Topic
	for i := range b.topics {
		t := convoy.Topic{Name: fmt.Sprintf("t%d", i)}
		for k := range b.subscribers {
			t.Subscribers = append(t.Subscribers, nodeID((i*b.subscribers+k)%b.nodes))
		}
		topics = append(topics, t)
	}
	return topics
}

// pubsubHeaderBytes is the part of every message the benchmark reads:
// when it was published, as a wall-clock UnixNano reading (comparable
// across the members' processes, which share the machine's clock).
const pubsubHeaderBytes = 16

// psMember is one member of the benchmark's group.
type psMember struct {
	id   convoy.NodeID
	ep   *rdmacount.Endpoint
	g    *convoy.Group
	subs map[string]bool
	// measuring: deliveries count and are timed.
	measuring atomic.Bool
	delivered atomic.Uint64
	mu        sync.Mutex
	latency   latencyHist
	bad       error // a delivery of a topic it does not subscribe to
}

// psCluster is the members of the benchmark's group that run in this
// process: all of them, or (with -netns) one.
type psCluster struct {
	members []*psMember
	topics  []string
}

// close closes the members' groups and endpoints.
func (cl *psCluster) close() error {
	var err error
	for _, m := range cl.members {
		if m.g != nil {
			err = errors.Join(err, m.g.Close())
		}
		err = errors.Join(err, m.ep.Close())
	}
	return err
}

func (b *pubsubBench) run(ctx context.Context, c *cli) error {
	var topics, group psRaw
	var err error
	if b.netns {
		topics, group, err = b.runNetns(ctx, c)
	} else {
		topics, group, err = b.runLoopback(ctx, c)
	}
	if err != nil {
		return err
	}
	where := "loopback TCP, all members in one process"
	if b.netns {
		where = "one process per member in network namespaces, links unshaped"
		if b.linkMbit > 0 {
			where = fmt.Sprintf("one process per member in network namespaces, links at %d Mbit/s", b.linkMbit)
		}
	}
	if !b.json {
		fmt.Fprintf(c.stdout, "# %d members, %d topics of %d subscribers, %s messages, %v after %v of warm-up; %s\n",
			b.nodes, b.topics, b.subscribers, formatSize(b.size), b.duration, b.warmup, where)
		fmt.Fprintf(c.stdout, "%-7s %11s %11s %8s %8s %8s %8s %8s %8s\n", "phase", "published/s", "delivered/s", "sent/B", "max", "recv/B", "max", "p50 ms", "p99 ms")
	}
	tr, gr := b.result("topics", &topics), b.result("group", &group)
	if gr.RecvPerByte > 0 {
		tr.RatioToGroup = (tr.SentPerByte + tr.RecvPerByte) / (gr.SentPerByte + gr.RecvPerByte)
	}
	for _, r := range []pubsubResult{tr, gr} {
		if err := b.print(c.stdout, r); err != nil {
			return err
		}
	}
	if !b.json {
		fmt.Fprintf(c.stdout, "# bytes per published byte, topics over the whole group: %.2f (subscribers/nodes = %.2f)\n",
			tr.RatioToGroup, float64(b.subscribers)/float64(b.nodes))
	}
	return nil
}

// runLoopback runs every member in this process, the phases one after
// the other.
func (b *pubsubBench) runLoopback(ctx context.Context, c *cli) (topics, group psRaw, err error) {
	log := newLogger(c.stderr, b.verbose)
	book := &addrBook{}
	members := make([]convoy.Member, b.nodes)
	eps := make([]*rdmacount.Endpoint, b.nodes)
	defer func() {
		if err != nil {
			for _, ep := range eps {
				if ep != nil {
					ep.Close()
				}
			}
		}
	}()
	for i := range b.nodes {
		ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: nodeID(i), ListenAddr: "127.0.0.1:0", Resolve: book.resolve, Logger: log})
		if err != nil {
			return psRaw{}, psRaw{}, err
		}
		book.set(nodeID(i), ep.Addr().String())
		members[i] = convoy.Member{ID: nodeID(i), Addr: ep.Addr().String()}
		eps[i] = rdmacount.Wrap(ep)
	}
	cl, err := b.open(ctx, log, members, eps)
	if err != nil {
		return psRaw{}, psRaw{}, err
	}
	defer func() { err = errors.Join(err, cl.close()) }()
	if topics, err = b.phase(ctx, cl, true, time.Now()); err != nil {
		return psRaw{}, psRaw{}, err
	}
	group, err = b.phase(ctx, cl, false, time.Now())
	return topics, group, err
}

// open opens the group of members at the members' endpoints eps (all of
// them, or one), closing the endpoints if it fails.
func (b *pubsubBench) open(ctx context.Context, log *slog.Logger, members []convoy.Member, eps []*rdmacount.Endpoint) (_ *psCluster, err error) {
	cl := &psCluster{}
	topics := b.pubsubTopics()
	for _, t := range topics {
		cl.topics = append(cl.topics, t.Name)
	}
	for _, ep := range eps {
		m := &psMember{id: ep.ID(), ep: ep, subs: make(map[string]bool)}
		for _, t := range topics {
			if slices.Contains(t.Subscribers, m.id) {
				m.subs[t.Name] = true
			}
		}
		cl.members = append(cl.members, m)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, cl.close())
		}
	}()
	groupLog := slog.New(slog.DiscardHandler)
	if b.verbose {
		groupLog = log
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(cl.members))
	for i, m := range cl.members {
		wg.Go(func() {
			m.g, errs[i] = convoy.Open(octx, convoy.Config{
				Self: m.id, Members: members, Endpoint: m.ep, Topics: topics,
				WindowMessages: b.window, Logger: groupLog,
			}, func(d convoy.Delivery) { cl.deliver(m, d) })
		})
	}
	wg.Wait()
	return cl, errors.Join(errs...)
}

// deliver is member m's handler.
func (cl *psCluster) deliver(m *psMember, d convoy.Delivery) {
	if d.Topic != "" && !m.subs[d.Topic] {
		m.mu.Lock()
		m.bad = fmt.Errorf("member %d delivered a message of topic %q, to which it does not subscribe", m.id, d.Topic)
		m.mu.Unlock()
		return
	}
	if !m.measuring.Load() || len(d.Payload) < pubsubHeaderBytes {
		return
	}
	lat := time.Duration(time.Now().UnixNano() - int64(binary.BigEndian.Uint64(d.Payload)))
	m.delivered.Add(1)
	m.mu.Lock()
	m.latency.add(lat)
	m.mu.Unlock()
}

// psRaw is what one phase measured at some of the members: the sums,
// each member's traffic and the latencies, merged across processes.
type psRaw struct {
	Published uint64      `json:"published"`
	PubBytes  uint64      `json:"pub_bytes"`
	Delivered uint64      `json:"delivered"`
	Sent      []int64     `json:"sent"` // by member
	Recv      []int64     `json:"recv"`
	Latency   latencyHist `json:"latency"`
}

// merge adds o to r.
func (r *psRaw) merge(o *psRaw) {
	r.Published += o.Published
	r.PubBytes += o.PubBytes
	r.Delivered += o.Delivered
	r.Sent = append(r.Sent, o.Sent...)
	r.Recv = append(r.Recv, o.Recv...)
	r.Latency.merge(&o.Latency)
}

// phase runs the load on the topics, or to the whole group, from begin
// on, and measures it: warm-up from begin, then -duration.
func (b *pubsubBench) phase(ctx context.Context, cl *psCluster, topics bool, begin time.Time) (psRaw, error) {
	if err := sleepUntil(ctx, begin); err != nil {
		return psRaw{}, err
	}
	pctx, stop := context.WithCancel(ctx)
	var published, pubBytes atomic.Uint64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, len(cl.members))
	for _, m := range cl.members {
		wg.Go(func() {
			payload := make([]byte, b.size)
			var tick *time.Ticker
			if b.rate > 0 {
				tick = time.NewTicker(time.Second / time.Duration(b.rate))
				defer tick.Stop()
			}
			for k := int(m.id); pctx.Err() == nil; k++ {
				if tick != nil {
					select {
					case <-tick.C:
					case <-pctx.Done():
						return
					}
				}
				p := slices.Clone(payload) // the group owns what it is given
				binary.BigEndian.PutUint64(p, uint64(time.Now().UnixNano()))
				var err error
				if topics {
					_, err = m.g.Publish(pctx, cl.topics[k%len(cl.topics)], p)
				} else {
					_, err = m.g.Send(pctx, p)
				}
				if err != nil {
					if pctx.Err() == nil {
						errs <- fmt.Errorf("member %d: %w", m.id, err)
					}
					return
				}
				if measuring.Load() {
					published.Add(1)
					pubBytes.Add(uint64(len(p)))
				}
			}
		})
	}
	wait := func(until time.Time) error {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	err := wait(begin.Add(b.warmup))
	if err == nil {
		for _, m := range cl.members {
			m.ep.Reset()
			m.delivered.Store(0)
			m.mu.Lock()
			m.latency = latencyHist{}
			m.mu.Unlock()
			m.measuring.Store(true)
		}
		measuring.Store(true)
		err = wait(begin.Add(b.warmup + b.duration))
	}
	measuring.Store(false)
	var raw psRaw
	for _, m := range cl.members {
		m.measuring.Store(false)
		sent, recv := m.ep.Totals(nil)
		raw.Sent, raw.Recv = append(raw.Sent, sent), append(raw.Recv, recv)
		raw.Delivered += m.delivered.Load()
		m.mu.Lock()
		raw.Latency.merge(&m.latency)
		if m.bad != nil {
			err = errors.Join(err, m.bad)
		}
		m.mu.Unlock()
	}
	stop()
	wg.Wait()
	if err != nil {
		return psRaw{}, err
	}
	raw.Published, raw.PubBytes = published.Load(), pubBytes.Load()
	return raw, nil
}

// result summarizes a phase measured at every member.
func (b *pubsubBench) result(phase string, raw *psRaw) pubsubResult {
	secs := b.duration.Seconds()
	res := pubsubResult{
		Phase: phase, Nodes: b.nodes, Topics: b.topics, Subscribers: b.subscribers, Bytes: b.size,
		Published: float64(raw.Published) / secs, Delivered: float64(raw.Delivered) / secs,
		LinkMbit: b.linkMbit,
	}
	if pb := float64(raw.PubBytes); pb > 0 {
		n := float64(len(raw.Sent))
		for i := range raw.Sent {
			res.SentPerByte += float64(raw.Sent[i]) / pb / n
			res.RecvPerByte += float64(raw.Recv[i]) / pb / n
			res.MaxSentPer = max(res.MaxSentPer, float64(raw.Sent[i])/pb)
			res.MaxRecvPer = max(res.MaxRecvPer, float64(raw.Recv[i])/pb)
		}
	}
	res.P50Millis = float64(raw.Latency.quantile(0.50)) / float64(time.Millisecond)
	res.P99Millis = float64(raw.Latency.quantile(0.99)) / float64(time.Millisecond)
	return res
}

func (b *pubsubBench) print(w io.Writer, r pubsubResult) error {
	if b.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	_, err := fmt.Fprintf(w, "%-7s %11.0f %11.0f %8.3f %8.3f %8.3f %8.3f %8.2f %8.2f\n",
		r.Phase, r.Published, r.Delivered, r.SentPerByte, r.MaxSentPer, r.RecvPerByte, r.MaxRecvPer, r.P50Millis, r.P99Millis)
	return err
}

// latencyHist counts latencies in buckets 1% wide: bucket k holds those
// from latencyBase^k up to latencyBase^(k+1) nanoseconds. It is what a
// member process reports, so that the quantiles over every member come
// out to within 1% without every sample.
type latencyHist struct {
	Buckets map[int]uint64 `json:"buckets"`
	N       uint64         `json:"n"`
}

// latencyBase is the ratio of a bucket's upper bound to its lower.
const latencyBase = 1.01

func (h *latencyHist) add(d time.Duration) {
	if h.Buckets == nil {
		h.Buckets = make(map[int]uint64)
	}
	k := 0
	if d > 1 {
		k = int(math.Log(float64(d)) / math.Log(latencyBase))
	}
	h.Buckets[k]++
	h.N++
}

func (h *latencyHist) merge(o *latencyHist) {
	for k, n := range o.Buckets {
		if h.Buckets == nil {
			h.Buckets = make(map[int]uint64)
		}
		h.Buckets[k] += n
	}
	h.N += o.N
}

// quantile returns the latency below which a fraction q of the samples
// lie, as its bucket's middle; 0 without samples.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.N == 0 {
		return 0
	}
	keys := slices.Sorted(maps.Keys(h.Buckets))
	rank := uint64(q * float64(h.N))
	var seen uint64
	for _, k := range keys {
		seen += h.Buckets[k]
		if seen > rank {
			return time.Duration(math.Pow(latencyBase, float64(k)+0.5))
		}
	}
	return time.Duration(math.Pow(latencyBase, float64(keys[len(keys)-1])+0.5))
}
