//go:build fabric

package rdma

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
)

// The fabric backend joins the backends every conformance test runs on,
// over libfabric's tcp provider on loopback.
func init() {
	backends = append(backends, struct {
		name string
		new  func(t *testing.T) testNet
	}{"fabric", func(t *testing.T) testNet { return newFabricNet(t, FabricConfig{}) }})
}

// numConns returns the number of control connections the endpoint has,
// pending or up.
func (e *FabricEndpoint) numConns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.conns)
}

// breakConnForTest breaks the connection to peer as a network failure
// would: this side loses it at once, and the peer when its endpoints see
// the connection go.
func (e *FabricEndpoint) breakConnForTest(peer NodeID) {
	e.mu.Lock()
	c := e.mu.conns[peer]
	e.mu.Unlock()
	if c == nil {
		return
	}
	err := &connError{peer: peer, cause: errors.New("broken by the test")}
	c.shutdown(err, err)
}

// fabricNet is a set of fabric endpoints on loopback that resolve each
// other.
type fabricNet struct {
	t    *testing.T
	base FabricConfig
	// listen makes the endpoints; ListenFabric unless a test sets it.
	listen func(FabricConfig) (*FabricEndpoint, error)

	mu  sync.Mutex
	eps map[NodeID]*FabricEndpoint
}

// newFabricNet returns a net whose endpoints start from base. Unless base
// has a logger, their debug logs are kept and shown if the test fails.
func newFabricNet(t *testing.T, base FabricConfig) *fabricNet {
	if base.Logger == nil {
		var logs testLogs
		base.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the endpoints' logs:\n%s", logs.String())
			}
		})
	}
	return &fabricNet{t: t, base: base, listen: ListenFabric, eps: make(map[NodeID]*FabricEndpoint)}
}

// testLogs collects log lines from several goroutines.
type testLogs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *testLogs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *testLogs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (n *fabricNet) resolve(id NodeID) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.eps[id]
	if ep == nil {
		return "", fmt.Errorf("no node %d", id)
	}
	return ep.Addr(), nil
}

func (n *fabricNet) endpoint(id NodeID) Endpoint {
	return n.fabricEndpoint(id, func(*FabricConfig) {})
}

func (n *fabricNet) fabricEndpoint(id NodeID, adjust func(*FabricConfig)) *FabricEndpoint {
	cfg := n.base
	cfg.ID = id
	cfg.Resolve = n.resolve
	adjust(&cfg)
	ep, err := n.listen(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { ep.Close() })
	n.mu.Lock()
	n.eps[id] = ep
	n.mu.Unlock()
	return ep
}

func (n *fabricNet) get(id NodeID) *FabricEndpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.eps[id]
}

func (n *fabricNet) breakLink(a, b NodeID) { n.get(a).breakConnForTest(b) }

func (n *fabricNet) conns(id NodeID) int { return n.get(id).numConns() }
