package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/convoy-gcs/convoy/ordering"
	"github.com/convoy-gcs/convoy/rdma"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder keeps one member's deliveries.
type recorder struct {
	mu  sync.Mutex
	got []Delivery
	ch  chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) handle(d Delivery) {
	r.mu.Lock()
	r.got = append(r.got, d)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		k := len(r.got)
		r.mu.Unlock()
		if k >= n {
			return
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("delivered %d of %d messages", k, n)
		}
	}
}

// heldLog records which messages every member holds, to check that atomic
// delivery never runs ahead of any member.
type heldLog struct {
	mu   sync.Mutex
	held []map[[2]uint64]bool // per member: (sender rank, seq)
}

func (h *heldLog) hook(member int) func(rank int, seq uint64) {
	return func(rank int, seq uint64) {
		h.mu.Lock()
		h.held[member][[2]uint64{uint64(rank), seq}] = true
		h.mu.Unlock()
	}
}

// cluster opens a group of n members on the given endpoints.
type testCluster struct {
	groups []*Group
	recs   []*recorder
	held   *heldLog
	ids    []NodeID
}

type clusterOpts struct {
	mode     Mode
	fanOut   int
	skews    []time.Duration
	endpoint func(i int) rdma.Endpoint
	addrs    []string
	// durable, if set, gives member i a durable log in durable(i).
	durable func(i int) string
}

func openCluster(t *testing.T, n int, o clusterOpts) *testCluster {
	t.Helper()
	c := &testCluster{held: &heldLog{}}
	members := make([]Member, n)
	for i := range members {
		members[i] = Member{ID: NodeID(i + 1)}
		if o.addrs != nil {
			members[i].Addr = o.addrs[i]
		}
		c.ids = append(c.ids, members[i].ID)
		c.held.held = append(c.held.held, make(map[[2]uint64]bool))
	}
	var wg sync.WaitGroup
	c.groups = make([]*Group, n)
	c.recs = make([]*recorder, n)
	errs := make([]error, n)
	// Every endpoint exists before any member opens: a member of a fixed
	// group connects to the others as it needs them, and the in-memory
	// fabric refuses a connection to an endpoint not made yet.
	cfgs := make([]Config, n)
	for i := 0; i < n; i++ {
		c.recs[i] = newRecorder()
		cfg := Config{Self: members[i].ID, Members: members, Mode: o.mode, FanOut: o.fanOut, BeaconInterval: time.Millisecond, test: hooks{onHeld: c.held.hook(i)}}
		if o.endpoint != nil {
			cfg.Endpoint = o.endpoint(i)
		}
		if o.durable != nil {
			cfg.Durable = &DurableConfig{Dir: o.durable(i)}
		}
		if o.skews != nil {
			skew := int64(o.skews[i])
			start := time.Now()
			cfg.Clock = func() int64 { return int64(time.Since(start)) + 1e12 + skew }
		}
		cfgs[i] = cfg
	}
	for i, cfg := range cfgs {
		wg.Go(func() { c.groups[i], errs[i] = Open(context.Background(), cfg, c.recs[i].handle) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *testCluster) close() {
	for _, g := range c.groups {
		if g != nil {
			g.Close()
		}
	}
}

// run has every member send msgs messages of random sizes concurrently and
// checks the guarantees of mode once all are delivered.
func (c *testCluster) run(t *testing.T, mode Mode, msgs int, seed uint64) {
	t.Helper()
	if mode == Atomic {
		for i, r := range c.recs {
			orig := r
			member := i
			c.groups[i].h = func(d Delivery) {
				c.held.mu.Lock()
				for j := range c.groups {
					sender := int(d.Sender) - 1
					if j != sender && !c.held.held[j][[2]uint64{uint64(sender), d.Seq}] {
						t.Errorf("member %d delivered %d#%d before member %d held it", member, d.Sender, d.Seq, j)
					}
				}
				c.held.mu.Unlock()
				orig.handle(d)
			}
		}
	}
	var wg sync.WaitGroup
	for i, g := range c.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(i)))
			for k := 0; k < msgs; k++ {
				size := 16 + r.IntN(100)
				if r.IntN(20) == 0 {
					size = 16 + r.IntN(300<<10) // a large message now and then
				}
				p := make([]byte, size)
				copy(p, fmt.Sprintf("%d:%d", i, k))
				if _, err := g.Send(context.Background(), p); err != nil {
					t.Error(err)
					return
				}
				if r.IntN(10) == 0 {
					time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	total := msgs * len(c.groups)
	for _, r := range c.recs {
		r.wait(t, total)
	}
	checkGuarantees(t, c.recs, mode, total)
}

func checkGuarantees(t *testing.T, recs []*recorder, mode Mode, total int) {
	t.Helper()
	for i, r := range recs {
		r.mu.Lock()
		got := r.got
		r.mu.Unlock()
		if len(got) != total {
			t.Fatalf("member %d delivered %d messages, want %d", i, len(got), total)
		}
		last := map[NodeID]uint64{}
		seen := map[string]bool{}
		for _, d := range got {
			if d.Seq != last[d.Sender]+1 {
				t.Fatalf("member %d: FIFO broken: %d#%d after #%d", i, d.Sender, d.Seq, last[d.Sender])
			}
			last[d.Sender] = d.Seq
			key := string(d.Payload[:min(len(d.Payload), 16)])
			if seen[key] {
				t.Fatalf("member %d: duplicate %q", i, key)
			}
			seen[key] = true
		}
	}
	if mode == Unordered {
		return
	}
	a := recs[0].got
	for i := 1; i < len(recs); i++ {
		b := recs[i].got
		for k := range a {
			if a[k].Index != b[k].Index || a[k].Sender != b[k].Sender || a[k].Seq != b[k].Seq || a[k].Timestamp != b[k].Timestamp {
				t.Fatalf("position %d: member 0 delivered %d#%d (index %d), member %d delivered %d#%d (index %d)",
					k, a[k].Sender, a[k].Seq, a[k].Index, i, b[k].Sender, b[k].Seq, b[k].Index)
			}
		}
	}
}

// Property test on the in-memory transport: random delays and reordering
// across connections, skewed clocks, 3–9 members all sending. Every member
// delivers the same sequence, per-sender FIFO holds, nothing is lost or
// duplicated, and atomic delivery never runs ahead of any member.
func TestGroupPropertiesMem(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, mode := range []Mode{Atomic, TotalOrder, Unordered} {
		for _, seed := range seeds {
			r := rand.New(rand.NewPCG(seed, 99))
			n := 3 + r.IntN(7)
			fanOut := 0
			if seed%2 == 0 {
				fanOut = 2
			}
			t.Run(fmt.Sprintf("%v/seed=%d/n=%d/fanout=%d", mode, seed, n, fanOut), func(t *testing.T) {
				fab := rdma.NewMemFabric(rdma.MemOptions{Seed: int64(seed), MaxDelay: 200 * time.Microsecond})
				defer fab.Close()
				eps := make([]rdma.Endpoint, n)
				for i := range eps {
					ep, err := fab.Endpoint(NodeID(i + 1))
					if err != nil {
						t.Fatal(err)
					}
					eps[i] = ep
				}
				defer func() {
					for _, ep := range eps {
						ep.Close()
					}
				}()
				skews := make([]time.Duration, n)
				for i := range skews {
					skews[i] = time.Duration(r.IntN(4000)-2000) * time.Microsecond
				}
				c := openCluster(t, n, clusterOpts{mode: mode, fanOut: fanOut, skews: skews, endpoint: func(i int) rdma.Endpoint { return eps[i] }})
				defer c.close()
				c.run(t, mode, 60, seed)
			})
		}
	}
}

// TestSkewBeyondMaxAhead: a member whose clock runs ahead of the others'
// by more than a peer's stamp may be (ordering.DefaultMaxAhead) costs
// latency only: the others hold its records until their clocks catch up,
// and every member delivers every message in the same order.
func TestSkewBeyondMaxAhead(t *testing.T) {
	fab := rdma.NewMemFabric(rdma.MemOptions{Seed: 5})
	defer fab.Close()
	eps := make([]rdma.Endpoint, 3)
	for i := range eps {
		ep, err := fab.Endpoint(NodeID(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = ep
		defer ep.Close()
	}
	skews := []time.Duration{0, 0, ordering.DefaultMaxAhead * 3 / 2}
	c := openCluster(t, 3, clusterOpts{mode: Atomic, skews: skews, endpoint: func(i int) rdma.Endpoint { return eps[i] }})
	defer c.close()
	c.run(t, Atomic, 20, 5)
}

// The same over real TCP on loopback, one goroutine-driven member each.
func TestGroupPropertiesTCP(t *testing.T) {
	for _, mode := range []Mode{Atomic, TotalOrder} {
		t.Run(mode.String(), func(t *testing.T) {
			addrs := freeAddrs(t, 4)
			c := openCluster(t, 4, clusterOpts{mode: mode, addrs: addrs})
			defer c.close()
			c.run(t, mode, 100, 7)
		})
	}
}

func freeAddrs(t *testing.T, n int) []string { return freeAddrsTB(t, n) }

func freeAddrsTB(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// openAll opens one group per config concurrently (members wait for each
// other's connections) and returns them with a function closing them all.
// It fails the test if any Open fails.
func openAll(tb testing.TB, cfgs []Config, h func(i int) Handler) ([]*Group, func()) {
	tb.Helper()
	groups := make([]*Group, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			groups[i], errs[i] = Open(context.Background(), cfgs[i], h(i))
		}()
	}
	wg.Wait()
	closeAll := func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			closeAll()
			tb.Fatal(err)
		}
	}
	return groups, closeAll
}
