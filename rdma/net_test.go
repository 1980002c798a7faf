package rdma

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// testNet is a set of endpoints on one backend, for tests that run
// against every backend.
type testNet interface {
	// endpoint returns a new endpoint for node id.
	endpoint(id NodeID) Endpoint
	// breakLink breaks the connection between a and b.
	breakLink(a, b NodeID)
	// conns returns how many connections node id has.
	conns(id NodeID) int
}

// backends lists the backends under test.
var backends = []struct {
	name string
	new  func(t *testing.T) testNet
}{
	{"mem", func(t *testing.T) testNet { return newMemNet(t, MemOptions{Seed: 1, MaxDelay: 20 * time.Microsecond}) }},
	{"tcp", func(t *testing.T) testNet { return newTCPNet(t, TCPConfig{}) }},
}

// forEachBackend runs test as a subtest for every backend.
func forEachBackend(t *testing.T, test func(t *testing.T, n testNet)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			test(t, b.new(t))
		})
	}
}

type memNet struct {
	t *testing.T
	f *MemFabric
}

func newMemNet(t *testing.T, opts MemOptions) *memNet {
	f := NewMemFabric(opts)
	t.Cleanup(func() { f.Close() })
	return &memNet{t: t, f: f}
}

func (n *memNet) endpoint(id NodeID) Endpoint {
	ep, err := n.f.Endpoint(id)
	if err != nil {
		n.t.Fatal(err)
	}
	return ep
}

func (n *memNet) breakLink(a, b NodeID) { n.f.BreakLink(a, b) }

func (n *memNet) conns(id NodeID) int {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	c := 0
	for p := range n.f.mu.conns {
		if p.lo == id || p.hi == id {
			c++
		}
	}
	return c
}

// tcpNet is a set of tcp endpoints on loopback that resolve each other.
type tcpNet struct {
	t    *testing.T
	base TCPConfig

	mu  sync.Mutex
	eps map[NodeID]*TCPEndpoint
}

func newTCPNet(t *testing.T, base TCPConfig) *tcpNet {
	return &tcpNet{t: t, base: base, eps: make(map[NodeID]*TCPEndpoint)}
}

func (n *tcpNet) resolve(id NodeID) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.eps[id]
	if ep == nil {
		return "", fmt.Errorf("no node %d", id)
	}
	return ep.Addr().String(), nil
}

func (n *tcpNet) endpoint(id NodeID) Endpoint {
	return n.tcpEndpoint(id, func(*TCPConfig) {})
}

func (n *tcpNet) tcpEndpoint(id NodeID, adjust func(*TCPConfig)) *TCPEndpoint {
	cfg := n.base
	cfg.ID = id
	cfg.Resolve = n.resolve
	adjust(&cfg)
	ep, err := ListenTCP(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { ep.Close() })
	n.mu.Lock()
	n.eps[id] = ep
	n.mu.Unlock()
	return ep
}

func (n *tcpNet) get(id NodeID) *TCPEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eps[id]
}

func (n *tcpNet) breakLink(a, b NodeID) { n.get(a).breakConnForTest(b) }

func (n *tcpNet) conns(id NodeID) int { return n.get(id).numConns() }
