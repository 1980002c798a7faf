package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

Runs a group of -nodes members in this process, each with its own TCP
endpoint on 127.0.0.1, with -topics atomic topics of -subscribers
subscribers each (topic i to members i*K .. i*K+K-1, modulo the group:
every member subscribes to about topics*K/nodes of them). Every member
publishes -size byte messages on the topics in turn, as fast as its window
lets it (or at -rate messages per second); then, in the same group and
under the same load, it sends them to the whole group instead (Send), the
baseline. For each phase it prints, measured for -duration after -warmup:

  published   messages published per second, all members together
  delivered   deliveries per second, all members together
  sent/B      bytes a member's transport sent per byte published (the mean
              over the members, and the largest)
  recv/B      the same for bytes received
  p50, p99    time from a publication to its delivery at a subscriber, over
              every delivery

and the ratio of the topics' bytes per published byte to the whole
group's, which multicast to topic subscribers only should bring near
subscribers/nodes. Bytes are those the members' transports carried
(messages, their headers, beacons and control records), without the
transport's own framing. Members check that every delivery is of a topic
they subscribe to.
`

// pubsubBench is a parsed "convoy bench pubsub" command line.
type pubsubBench struct {
	nodes, topics, subscribers int
	size                       int
	duration, warmup           time.Duration
	rate                       int
	window                     int
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
	fs.IntVar(&b.rate, "rate", 0, "messages per second each member publishes; 0 as fast as its window lets it")
	fs.IntVar(&b.window, "window", 1024, "each member's messages undelivered (Config.WindowMessages)")
	fs.BoolVar(&b.json, "json", false, "print one JSON object per line instead of a table")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	var err error
	if b.size, err = parseSize(*size); err != nil {
		return nil, usagef("-size: %v", err)
	}
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
		return nil, usagef("-rate must not be negative and -window positive")
	}
	return b, nil
}

// pubsubHeaderBytes is the part of every message the benchmark reads:
// when it was published, in nanoseconds since the phase started.
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
	samples   []time.Duration
	bad       error // a delivery of a topic it does not subscribe to
}

// psCluster is the benchmark's group.
type psCluster struct {
	start   time.Time
	members []*psMember
	topics  []string
}

func (b *pubsubBench) run(ctx context.Context, c *cli) (err error) {
	log := newLogger(c.stderr, b.verbose)
	cl, err := b.open(ctx, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, m := range cl.members {
			err = errors.Join(err, m.g.Close(), m.ep.Close())
		}
	}()
	if !b.json {
		fmt.Fprintf(c.stdout, "# %d members, %d topics of %d subscribers, %s messages, %v after %v of warm-up; loopback TCP, all members in one process\n",
			b.nodes, b.topics, b.subscribers, formatSize(b.size), b.duration, b.warmup)
		fmt.Fprintf(c.stdout, "%-7s %11s %11s %8s %8s %8s %8s %8s %8s\n", "phase", "published/s", "delivered/s", "sent/B", "max", "recv/B", "max", "p50 ms", "p99 ms")
	}
	topics, err := b.phase(ctx, cl, true)
	if err != nil {
		return err
	}
	group, err := b.phase(ctx, cl, false)
	if err != nil {
		return err
	}
	if group.RecvPerByte > 0 {
		topics.RatioToGroup = (topics.SentPerByte + topics.RecvPerByte) / (group.SentPerByte + group.RecvPerByte)
	}
	for _, r := range []pubsubResult{topics, group} {
		if err := b.print(c.stdout, r); err != nil {
			return err
		}
	}
	if !b.json {
		fmt.Fprintf(c.stdout, "# bytes per published byte, topics over the whole group: %.2f (subscribers/nodes = %.2f)\n",
			topics.RatioToGroup, float64(b.subscribers)/float64(b.nodes))
	}
	return nil
}

// open opens the group.
func (b *pubsubBench) open(ctx context.Context, log *slog.Logger) (_ *psCluster, err error) {
	cl := &psCluster{start: time.Now()}
	var topics []convoy.Topic
	for i := range b.topics {
		t := convoy.Topic{Name: fmt.Sprintf("t%d", i)}
		for k := range b.subscribers {
			t.Subscribers = append(t.Subscribers, nodeID((i*b.subscribers+k)%b.nodes))
		}
		topics = append(topics, t)
		cl.topics = append(cl.topics, t.Name)
	}
	book := &addrBook{}
	members := make([]convoy.Member, b.nodes)
	defer func() {
		if err != nil {
			for _, m := range cl.members {
				if m.g != nil {
					m.g.Close()
				}
				m.ep.Close()
			}
		}
	}()
	for i := range b.nodes {
		ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: nodeID(i), ListenAddr: "127.0.0.1:0", Resolve: book.resolve, Logger: log})
		if err != nil {
			return nil, err
		}
		book.set(nodeID(i), ep.Addr().String())
		members[i] = convoy.Member{ID: nodeID(i), Addr: ep.Addr().String()}
		m := &psMember{id: nodeID(i), ep: rdmacount.Wrap(ep), subs: make(map[string]bool)}
		for _, t := range topics {
			if slices.Contains(t.Subscribers, m.id) {
				m.subs[t.Name] = true
			}
		}
		cl.members = append(cl.members, m)
	}
	groupLog := slog.New(slog.DiscardHandler)
	if b.verbose {
		groupLog = log
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, b.nodes)
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
	sent := time.Duration(binary.BigEndian.Uint64(d.Payload))
	m.delivered.Add(1)
	m.mu.Lock()
	m.samples = append(m.samples, time.Since(cl.start)-sent)
	m.mu.Unlock()
}

// phase runs the load on the topics, or to the whole group, and
// measures it.
func (b *pubsubBench) phase(ctx context.Context, cl *psCluster, topics bool) (pubsubResult, error) {
	pctx, stop := context.WithCancel(ctx)
	var published, pubBytes atomic.Uint64
	var measuring atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, len(cl.members))
	for i, m := range cl.members {
		wg.Go(func() {
			payload := make([]byte, b.size)
			var tick *time.Ticker
			if b.rate > 0 {
				tick = time.NewTicker(time.Second / time.Duration(b.rate))
				defer tick.Stop()
			}
			for k := i; pctx.Err() == nil; k++ {
				if tick != nil {
					select {
					case <-tick.C:
					case <-pctx.Done():
						return
					}
				}
				p := slices.Clone(payload) // the group owns what it is given
				binary.BigEndian.PutUint64(p, uint64(time.Since(cl.start)))
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
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
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
	err := wait(b.warmup)
	if err == nil {
		for _, m := range cl.members {
			m.ep.Reset()
			m.delivered.Store(0)
			m.mu.Lock()
			m.samples = m.samples[:0]
			m.mu.Unlock()
			m.measuring.Store(true)
		}
		measuring.Store(true)
		err = wait(b.duration)
	}
	measuring.Store(false)
	type count struct{ sent, recv int64 }
	counts := make([]count, len(cl.members))
	var samples []time.Duration
	var delivered uint64
	for i, m := range cl.members {
		m.measuring.Store(false)
		counts[i].sent, counts[i].recv = m.ep.Totals(nil)
		delivered += m.delivered.Load()
		m.mu.Lock()
		samples = append(samples, m.samples...)
		if m.bad != nil {
			err = errors.Join(err, m.bad)
		}
		m.mu.Unlock()
	}
	stop()
	wg.Wait()
	if err != nil {
		return pubsubResult{}, err
	}
	secs := b.duration.Seconds()
	res := pubsubResult{
		Phase: "group", Nodes: b.nodes, Topics: b.topics, Subscribers: b.subscribers, Bytes: b.size,
		Published: float64(published.Load()) / secs, Delivered: float64(delivered) / secs,
	}
	if topics {
		res.Phase = "topics"
	}
	if pb := float64(pubBytes.Load()); pb > 0 {
		for _, c := range counts {
			res.SentPerByte += float64(c.sent) / pb / float64(len(counts))
			res.RecvPerByte += float64(c.recv) / pb / float64(len(counts))
			res.MaxSentPer = max(res.MaxSentPer, float64(c.sent)/pb)
			res.MaxRecvPer = max(res.MaxRecvPer, float64(c.recv)/pb)
		}
	}
	if len(samples) > 0 {
		slices.Sort(samples)
		res.P50Millis = float64(samples[len(samples)/2]) / float64(time.Millisecond)
		res.P99Millis = float64(samples[len(samples)*99/100]) / float64(time.Millisecond)
	}
	return res, nil
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
