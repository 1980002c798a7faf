package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

// End-to-end conformance: the layers above the transport, run on every
// backend. A backend conforms when RDMC (package multicast) delivers
// messages of every awkward size intact with every algorithm, stops the
// group once on every survivor when a relay crashes, and a group in
// Atomic mode delivers one order on every member.

// e2eWait bounds every wait of these tests.
const e2eWait = 30 * time.Second

var algorithms = []multicast.Algorithm{multicast.Sequential, multicast.Chain, multicast.BinomialTree, multicast.BinomialPipeline}

// rdmcMember records what one multicast group member delivered.
type rdmcMember struct {
	mu       sync.Mutex
	msgs     [][]byte
	failures []error
	changed  chan struct{}
}

func newRDMCMember() *rdmcMember { return &rdmcMember{changed: make(chan struct{}, 1)} }

func (m *rdmcMember) callbacks() multicast.Callbacks {
	return multicast.Callbacks{
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

func (m *rdmcMember) poke() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds for m.
func (m *rdmcMember) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(e2eWait)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		ok := cond()
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-m.changed:
		case <-deadline.C:
			m.mu.Lock()
			defer m.mu.Unlock()
			t.Fatalf("timed out waiting for %s: %d messages, failures %v", what, len(m.msgs), m.failures)
		}
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

func ids(eps []rdma.Endpoint) []rdma.NodeID {
	out := make([]rdma.NodeID, len(eps))
	for i, ep := range eps {
		out[i] = ep.ID()
	}
	return out
}

// Every algorithm delivers messages of awkward sizes (empty, one byte, a
// block less or more by one, many blocks and a remainder) intact and in
// order to every member, several messages in flight at once; each member
// checks what it got by checksum and byte for byte.
func TestE2ERDMCSizes(t *testing.T) {
	const block = 4096
	sizes := []int{0, 1, block - 1, block + 1, block * 9, 3, block*20 + 17}
	for _, b := range rdma.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			eps, _ := b.Nodes(t, 8)
			for _, alg := range algorithms {
				for _, n := range []int{1, 2, 3, 5, 8} {
					t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
						cfg := multicast.GroupConfig{
							ID: uint64(alg)*100 + uint64(n), Members: ids(eps)[:n], Root: eps[0].ID(),
							Algorithm: alg, BlockBytes: block, SmallThreshold: -1,
						}
						groups := make([]*multicast.Group, n)
						members := make([]*rdmcMember, n)
						for i := range n {
							members[i] = newRDMCMember()
							g, err := multicast.NewGroup(context.Background(), eps[i], cfg, members[i].callbacks())
							if err != nil {
								t.Fatal(err)
							}
							defer g.Close()
							groups[i] = g
						}
						var want [][]byte
						for i, size := range sizes {
							msg := payload(uint64(i), size)
							want = append(want, msg)
							if err := groups[0].Send(context.Background(), msg); err != nil {
								t.Fatal(err)
							}
						}
						for i, m := range members {
							m.waitFor(t, fmt.Sprintf("%d messages", len(sizes)), func() bool { return len(m.msgs) >= len(sizes) || len(m.failures) > 0 })
							m.mu.Lock()
							got, failures := m.msgs, m.failures
							m.mu.Unlock()
							if len(failures) > 0 {
								t.Fatalf("member %d: group failed: %v", i, failures)
							}
							for j := range want {
								if crc32.ChecksumIEEE(got[j]) != crc32.ChecksumIEEE(want[j]) || !bytes.Equal(got[j], want[j]) {
									t.Fatalf("member %d message %d: %d bytes crc %08x, want %d bytes crc %08x", i, j,
										len(got[j]), crc32.ChecksumIEEE(got[j]), len(want[j]), crc32.ChecksumIEEE(want[j]))
								}
							}
						}
					})
				}
			}
		})
	}
}

// A relay crashing in the middle of a transfer stops the group on every
// surviving member with exactly one failure, including members that are
// not its neighbours; nothing hangs and no goroutine is left behind.
func TestE2ERDMCRelayCrash(t *testing.T) {
	for _, b := range rdma.Backends() {
		for _, alg := range []multicast.Algorithm{multicast.Chain, multicast.BinomialPipeline} {
			t.Run(b.Name+"/"+alg.String(), func(t *testing.T) {
				eps, crash := b.Nodes(t, 6)
				const victim = 2
				started := make(chan struct{})
				var once sync.Once
				members := make([]*rdmcMember, len(eps))
				cfg := multicast.GroupConfig{ID: 4, Members: ids(eps), Root: eps[0].ID(), Algorithm: alg, BlockBytes: 1024, SmallThreshold: -1}
				var groups []*multicast.Group
				for i := range eps {
					members[i] = newRDMCMember()
					cb := members[i].callbacks()
					if i == victim {
						// The victim never takes the message: the transfer
						// stalls at it until it crashes.
						cb.Alloc = func(int) []byte {
							once.Do(func() { close(started) })
							return nil
						}
					}
					g, err := multicast.NewGroup(context.Background(), eps[i], cfg, cb)
					if err != nil {
						t.Fatal(err)
					}
					defer g.Close()
					groups = append(groups, g)
				}
				if err := groups[0].Send(context.Background(), payload(1, 1024*500)); err != nil {
					t.Fatal(err)
				}
				select {
				case <-started:
				case <-time.After(e2eWait):
					t.Fatal("the message never reached the victim")
				}
				crash(victim)
				for i, m := range members {
					if i != victim {
						m.waitFor(t, "failure", func() bool { return len(m.failures) > 0 })
					}
				}
				if err := groups[0].Send(context.Background(), []byte("x")); !errors.Is(err, multicast.ErrGroupFailed) {
					t.Errorf("Send after failure = %v, want ErrGroupFailed", err)
				}
				// No callback starts after Close: the counts are final.
				for _, g := range groups {
					g.Close()
				}
				for i, m := range members {
					if i == victim {
						continue
					}
					m.mu.Lock()
					if len(m.failures) != 1 || !errors.Is(m.failures[0], multicast.ErrGroupFailed) {
						t.Errorf("member %d: failures %v, want exactly one ErrGroupFailed", i, m.failures)
					}
					m.mu.Unlock()
				}
			})
		}
	}
}

// A group of three in Atomic mode, every member sending, delivers the same
// messages in the same order on every member.
func TestE2EAtomicGroup(t *testing.T) {
	const n, msgs = 3, 60
	for _, b := range rdma.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			eps, _ := b.Nodes(t, n)
			members := make([]convoy.Member, n)
			for i := range members {
				members[i] = convoy.Member{ID: eps[i].ID()}
			}
			var mu sync.Mutex
			got := make([][]string, n)
			done := make([]chan struct{}, n)
			groups := make([]*convoy.Group, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				done[i] = make(chan struct{})
				cfg := convoy.Config{Self: members[i].ID, Members: members, Mode: convoy.Atomic, Endpoint: eps[i], BeaconInterval: time.Millisecond}
				h := func(d convoy.Delivery) {
					mu.Lock()
					defer mu.Unlock()
					got[i] = append(got[i], fmt.Sprintf("index %d from %d: %d bytes, crc %08x", d.Index, d.Sender, len(d.Payload), crc32.ChecksumIEEE(d.Payload)))
					if len(got[i]) == msgs {
						close(done[i])
					}
				}
				wg.Go(func() { groups[i], errs[i] = convoy.Open(context.Background(), cfg, h) })
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("member %d: %v", i, err)
				}
				defer groups[i].Close()
			}
			ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
			defer cancel()
			for k := range msgs {
				wg.Go(func() {
					// Every third message is large enough to take RDMC's
					// block path rather than the batches of small ones.
					body := fmt.Appendf(nil, "m%d", k)
					if k%3 == 0 {
						body = append(body, payload(uint64(k), 200<<10)...)
					}
					if _, err := groups[k%n].Send(ctx, body, convoy.WaitDelivered()); err != nil {
						t.Errorf("Send %d: %v", k, err)
					}
				})
			}
			wg.Wait()
			for i := range n {
				select {
				case <-done[i]:
				case <-ctx.Done():
					t.Fatalf("member %d delivered %d of %d messages", i, len(got[i]), msgs)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i := 1; i < n; i++ {
				for k := range got[0] {
					if got[i][k] != got[0][k] {
						t.Fatalf("member %d delivered %s, member 1 %s", i+1, got[i][k], got[0][k])
					}
				}
			}
		})
	}
}
