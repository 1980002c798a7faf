package multicast

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy/rdma"
)

// member records what one group member saw.
type member struct {
	mu       sync.Mutex
	msgs     [][]byte
	failures []error
	changed  chan struct{} // receives a value after every callback
}

func newMember() *member { return &member{changed: make(chan struct{}, 1)} }

func (m *member) callbacks() Callbacks {
	return Callbacks{
		Complete: func(msg []byte) {
			m.mu.Lock()
			m.msgs = append(m.msgs, msg)
			m.mu.Unlock()
			m.poke()
		},
		Failed: func(err error) {
			m.mu.Lock()
			m.failures = append(m.failures, err)
			m.mu.Unlock()
			m.poke()
		},
	}
}

func (m *member) poke() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds for m, or fails the test.
func (m *member) waitFor(t *testing.T, what string, cond func(m *member) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		m.mu.Lock()
		ok := cond(m)
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-m.changed:
		case <-deadline:
			m.mu.Lock()
			defer m.mu.Unlock()
			t.Fatalf("timed out waiting for %s: %d messages, failures %v", what, len(m.msgs), m.failures)
		}
	}
}

func (m *member) waitMessages(t *testing.T, n int) {
	t.Helper()
	m.waitFor(t, fmt.Sprintf("%d messages", n), func(m *member) bool { return len(m.msgs) >= n || len(m.failures) > 0 })
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.failures) > 0 {
		t.Fatalf("group failed: %v", m.failures)
	}
}

// fabric abstracts the two transports the tests run on.
type fabric struct {
	eps   []rdma.Endpoint
	mem   *rdma.MemFabric
	close func()
}

func newMemFabric(t *testing.T, n int, seed int64) *fabric {
	t.Helper()
	f := &fabric{mem: rdma.NewMemFabric(rdma.MemOptions{Seed: seed})}
	for i := 0; i < n; i++ {
		ep, err := f.mem.Endpoint(rdma.NodeID(i + 1))
		if err != nil {
			t.Fatal(err)
		}
		f.eps = append(f.eps, ep)
	}
	f.close = func() {
		for _, ep := range f.eps {
			ep.Close()
		}
		f.mem.Close()
	}
	return f
}

func newTCPFabric(t *testing.T, n int) *fabric { return newTCPFabricB(t, n) }

func newTCPFabricB(t testing.TB, n int) *fabric {
	t.Helper()
	f := &fabric{}
	addrs := make(map[rdma.NodeID]string)
	var mu sync.Mutex
	resolve := func(id rdma.NodeID) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if a, ok := addrs[id]; ok {
			return a, nil
		}
		return "", fmt.Errorf("unknown node %d", id)
	}
	for i := 0; i < n; i++ {
		ep, err := rdma.ListenTCP(rdma.TCPConfig{ID: rdma.NodeID(i + 1), ListenAddr: "127.0.0.1:0", Resolve: resolve})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		addrs[ep.ID()] = ep.Addr().String()
		mu.Unlock()
		f.eps = append(f.eps, ep)
	}
	f.close = func() {
		for _, ep := range f.eps {
			ep.Close()
		}
	}
	return f
}

func (f *fabric) ids() []rdma.NodeID {
	ids := make([]rdma.NodeID, len(f.eps))
	for i, ep := range f.eps {
		ids[i] = ep.ID()
	}
	return ids
}

// openGroup creates the group on every listed endpoint.
func openGroup(t *testing.T, f *fabric, cfg GroupConfig, idx []int) ([]*Group, []*member) {
	t.Helper()
	groups := make([]*Group, len(idx))
	members := make([]*member, len(idx))
	for i, e := range idx {
		members[i] = newMember()
		g, err := NewGroup(context.Background(), f.eps[e], cfg, members[i].callbacks())
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = g
	}
	return groups, members
}

func closeAll(groups []*Group) {
	for _, g := range groups {
		g.Close()
	}
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// checkSame verifies that every member delivered exactly want, in order.
func checkSame(t *testing.T, members []*member, want [][]byte) {
	t.Helper()
	for i, m := range members {
		m.mu.Lock()
		got := m.msgs
		m.mu.Unlock()
		if len(got) != len(want) {
			t.Fatalf("member %d delivered %d messages, want %d", i, len(got), len(want))
		}
		for j := range want {
			if crc32.ChecksumIEEE(got[j]) != crc32.ChecksumIEEE(want[j]) || !bytes.Equal(got[j], want[j]) {
				t.Fatalf("member %d message %d: %d bytes crc %08x, want %d bytes crc %08x", i, j,
					len(got[j]), crc32.ChecksumIEEE(got[j]), len(want[j]), crc32.ChecksumIEEE(want[j]))
			}
		}
	}
}

var algorithms = []Algorithm{Sequential, Chain, BinomialTree, BinomialPipeline}

func testSizes(t *testing.T, f *fabric, sizes []int) {
	const block = 4096
	for _, alg := range algorithms {
		for _, n := range []int{1, 2, 3, 5, 8} {
			if n > len(f.eps) {
				continue
			}
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				idx := make([]int, n)
				for i := range idx {
					idx[i] = i
				}
				cfg := GroupConfig{
					ID: uint64(alg)*100 + uint64(n), Members: f.ids()[:n], Root: f.eps[0].ID(),
					Algorithm: alg, BlockBytes: block, SmallThreshold: -1,
				}
				groups, members := openGroup(t, f, cfg, idx)
				defer closeAll(groups)
				var want [][]byte
				for i, size := range sizes {
					msg := payload(uint64(i), size)
					want = append(want, msg)
					if err := groups[0].Send(context.Background(), msg); err != nil {
						t.Fatal(err)
					}
				}
				for _, m := range members {
					m.waitMessages(t, len(sizes))
				}
				checkSame(t, members, want)
			})
		}
	}
}

// Every algorithm delivers messages of awkward sizes intact, in order, to
// every member; several messages are in flight at once.
func TestGroupSizesMem(t *testing.T) {
	f := newMemFabric(t, 8, 1)
	defer f.close()
	testSizes(t, f, []int{0, 1, 4095, 4097, 4096 * 9, 3, 4096*20 + 17})
}

func TestGroupSizesTCP(t *testing.T) {
	f := newTCPFabric(t, 8)
	defer f.close()
	testSizes(t, f, []int{0, 1, 4095, 4097, 4096 * 9, 3, 4096*20 + 17})
}

// Small and large messages travel on different channels but complete in
// send order on every member, including the root.
func TestGroupMixedOrder(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			f := newMemFabric(t, 5, seed)
			defer f.close()
			cfg := GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[2].ID(), BlockBytes: 1024, SmallThreshold: 100, BatchBytes: 512, BatchCredits: 2}
			groups, members := openGroup(t, f, cfg, []int{0, 1, 2, 3, 4})
			defer closeAll(groups)
			root := groups[2]
			r := rand.New(rand.NewPCG(uint64(seed), 0))
			var want [][]byte
			for i := 0; i < 300; i++ {
				size := r.IntN(120)
				if r.IntN(10) == 0 {
					size = r.IntN(5000)
				}
				msg := payload(uint64(i), size)
				want = append(want, msg)
				if err := root.Send(context.Background(), msg); err != nil {
					t.Fatal(err)
				}
			}
			for _, m := range members {
				m.waitMessages(t, len(want))
			}
			checkSame(t, members, want)
		})
	}
}

// Groups with different roots and overlapping members share the
// endpoints' connections without interfering.
func TestGroupOverlapping(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T) *fabric{
		"mem": func(t *testing.T) *fabric { return newMemFabric(t, 4, 7) },
		"tcp": func(t *testing.T) *fabric { return newTCPFabric(t, 4) },
	} {
		t.Run(name, func(t *testing.T) {
			f := mk(t)
			defer f.close()
			ids := f.ids()
			type gm struct {
				groups  []*Group
				members []*member
				want    [][]byte
			}
			var all []*gm
			for root := 0; root < 4; root++ {
				idx := []int{root, (root + 1) % 4, (root + 2) % 4}
				mem := []rdma.NodeID{ids[idx[0]], ids[idx[1]], ids[idx[2]]}
				cfg := GroupConfig{ID: uint64(10 + root), Members: mem, Root: ids[root], BlockBytes: 2048, Algorithm: algorithms[root]}
				groups, members := openGroup(t, f, cfg, idx)
				defer closeAll(groups)
				all = append(all, &gm{groups: groups, members: members})
			}
			var wg sync.WaitGroup
			for gi, x := range all {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 20; i++ {
						msg := payload(uint64(gi*1000+i), (i*7919)%20000)
						x.want = append(x.want, msg)
						if err := x.groups[0].Send(context.Background(), msg); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			for _, x := range all {
				for _, m := range x.members {
					m.waitMessages(t, len(x.want))
				}
				checkSame(t, x.members, x.want)
			}
		})
	}
}

// A stream of small messages is packed into few batch frames.
func TestGroupSmallBatching(t *testing.T) {
	f := newMemFabric(t, 3, 5)
	defer f.close()
	cfg := GroupConfig{ID: 3, Members: f.ids(), Root: f.eps[0].ID()}
	groups, members := openGroup(t, f, cfg, []int{0, 1, 2})
	defer closeAll(groups)
	var want [][]byte
	for i := 0; i < 5000; i++ {
		msg := payload(uint64(i), 64)
		want = append(want, msg)
		if err := groups[0].Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range members {
		m.waitMessages(t, len(want))
	}
	checkSame(t, members, want)
	groups[0].mu.Lock()
	frames := groups[0].mu.root.batches.sealedBase
	groups[0].mu.Unlock()
	if frames >= uint64(len(want))/4 {
		t.Errorf("%d messages took %d batch frames; want batching", len(want), frames)
	}
	t.Logf("%d small messages in %d frames", len(want), frames)
}

// A relay crashing in the middle of a transfer stops the group on every
// surviving member with exactly one failure, including members that are
// not its neighbours; nothing hangs and no goroutine is left behind.
func TestGroupRelayCrash(t *testing.T) {
	for _, alg := range algorithms {
		t.Run("mem/"+alg.String(), func(t *testing.T) {
			f := newMemFabric(t, 6, 11)
			defer f.close()
			testRelayCrash(t, f, alg, func(victim int) { f.mem.Crash(f.eps[victim].ID()) })
		})
	}
	// On tcp a crash is the victim's endpoint going away: its connections
	// close under the peers.
	for _, alg := range []Algorithm{Chain, BinomialPipeline} {
		t.Run("tcp/"+alg.String(), func(t *testing.T) {
			f := newTCPFabric(t, 6)
			defer f.close()
			testRelayCrash(t, f, alg, func(victim int) { f.eps[victim].Close() })
		})
	}
}

func testRelayCrash(t *testing.T, f *fabric, alg Algorithm, crash func(victim int)) {
	const victim = 2
	started := make(chan struct{})
	var once sync.Once
	members := make([]*member, len(f.eps))
	groups := make([]*Group, len(f.eps))
	cfg := GroupConfig{ID: 4, Members: f.ids(), Root: f.eps[0].ID(), Algorithm: alg, BlockBytes: 1024, SmallThreshold: -1}
	for i := range f.eps {
		members[i] = newMember()
		cb := members[i].callbacks()
		if i == victim {
			cb.Alloc = func(size int) []byte {
				once.Do(func() { close(started) })
				return nil
			}
		}
		g, err := NewGroup(context.Background(), f.eps[i], cfg, cb)
		if err != nil {
			t.Fatal(err)
		}
		groups[i] = g
	}
	defer closeAll(groups)
	if err := groups[0].Send(context.Background(), payload(1, 1024*500)); err != nil {
		t.Fatal(err)
	}
	<-started
	crash(victim)
	for i, m := range members {
		if i != victim {
			m.waitFor(t, "failure", func(m *member) bool { return len(m.failures) > 0 })
		}
	}
	// Give stray events a chance to show up, then count.
	time.Sleep(50 * time.Millisecond)
	for i, m := range members {
		if i == victim {
			continue
		}
		m.mu.Lock()
		if len(m.failures) != 1 || !errors.Is(m.failures[0], ErrGroupFailed) {
			t.Errorf("member %d: failures %v, want exactly one ErrGroupFailed", i, m.failures)
		}
		m.mu.Unlock()
	}
	if err := groups[0].Send(context.Background(), []byte("x")); !errors.Is(err, ErrGroupFailed) {
		t.Errorf("Send after failure = %v, want ErrGroupFailed", err)
	}
}

// Send applies backpressure: with NoWait it reports a full queue instead
// of waiting, and a waiting Send honours its context.
func TestGroupBackpressure(t *testing.T) {
	f := newMemFabric(t, 2, 3)
	defer f.close()
	// The receiver never joins, so nothing completes.
	m := newMember()
	g, err := NewGroup(context.Background(), f.eps[0], GroupConfig{ID: 5, Members: f.ids(), Root: f.eps[0].ID(), MaxQueuedMessages: 3, NoWait: true}, m.callbacks())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for i := 0; i < 3; i++ {
		if err := g.Send(context.Background(), []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Send(context.Background(), []byte("m")); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("Send on a full queue = %v, want ErrBackpressure", err)
	}
	g.cfg.NoWait = false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Send(ctx, []byte("m")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting Send = %v, want DeadlineExceeded", err)
	}
}

func TestGroupSendErrors(t *testing.T) {
	f := newMemFabric(t, 2, 3)
	defer f.close()
	cfg := GroupConfig{ID: 6, Members: f.ids(), Root: f.eps[0].ID(), MaxMessageBytes: 100}
	groups, _ := openGroup(t, f, cfg, []int{0, 1})
	if err := groups[1].Send(context.Background(), nil); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Send on a receiver = %v, want ErrNotRoot", err)
	}
	if err := groups[0].Send(context.Background(), make([]byte, 101)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized Send = %v, want ErrTooLarge", err)
	}
	closeAll(groups)
	if err := groups[0].Send(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
}

func TestGroupConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  GroupConfig
	}{
		{"no members", GroupConfig{Root: 1}},
		{"root not member", GroupConfig{Members: []rdma.NodeID{1, 2}, Root: 3}},
		{"duplicate", GroupConfig{Members: []rdma.NodeID{1, 1}, Root: 1}},
		{"id range", GroupConfig{ID: 1 << 60, Members: []rdma.NodeID{1}, Root: 1}},
		{"batch too small", GroupConfig{Members: []rdma.NodeID{1}, Root: 1, SmallThreshold: 100, BatchBytes: 50}},
		{"algorithm", GroupConfig{Members: []rdma.NodeID{1}, Root: 1, Algorithm: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.cfg.withDefaults(); err == nil {
				t.Fatal("invalid config accepted")
			}
		})
	}
}

func spinYield() { runtime.Gosched() }

// A large message can finish at the root before the batch frame that
// carries its placeholder between small messages; when the frame then
// completes, the small messages after it must still complete, in order.
func TestGroupLargeBeforeItsBatch(t *testing.T) {
	f := newMemFabric(t, 2, 1)
	defer f.close()
	m := newMember()
	// The receiver never opens the group: no credits, nothing leaves, and
	// the test plays the transport's completions by hand.
	g, err := NewGroup(context.Background(), f.eps[0], GroupConfig{ID: 1, Members: f.ids(), Root: f.eps[0].ID(), SmallThreshold: 16}, m.callbacks())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.mu.Lock()
	r, b := &g.mu.root, &g.mu.root.batches
	b.outstanding = 1 // pretend a frame is in flight so that the next one fills
	for _, msg := range [][]byte{[]byte("s0"), make([]byte, 100)} {
		r.enqueue(g, msg)
	}
	b.outstanding = 0
	g.pumpBatchesLocked() // idle now: seals [s0, L1]
	if len(b.sealed) != 1 || b.sealed[0].first != 0 || b.sealed[0].end != 2 {
		t.Fatalf("sealed frames %d, want one holding messages 0 and 1", len(b.sealed))
	}
	r.markDone(g, 1) // the large message finished first
	b.next[1], b.outstanding = 1, 1
	g.batchSentLocked(1, 0) // the frame's send completes: the queue empties
	r.enqueue(g, []byte("s2"))
	g.unlockAndDeliver()
	m.waitMessages(t, 2)
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.msgs) != 2 || string(m.msgs[0]) != "s0" || len(m.msgs[1]) != 100 {
		t.Fatalf("root completed %q, want s0 then the large message", m.msgs)
	}
}
