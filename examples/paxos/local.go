package paxos

import (
	"context"
	"sync"

	"github.com/convoy-gcs/convoy"
)

// NewLocal returns a store that is not replicated: a node without a
// group, which applies each command to its state in memory as soon as it
// is sent, with no network and no disk. It serves the same HTTP API
// through the same state machine as a member of a group, and exists to
// measure what replication costs: its throughput is the ceiling a
// replicated store can approach. Its Group returns nil; its state is
// lost when the process exits.
func NewLocal(opts Options) (*Node, error) {
	opts, err := opts.withDefaults(convoy.Config{})
	if err != nil {
		return nil, err
	}
	n, err := newNode(1, opts)
	if err != nil {
		return nil, err
	}
	n.g = &localGroup{n: n}
	return n, nil
}

// localGroup stands in for the group of a node that NewLocal made: Send
// applies the command at once, as a group of this one member would
// deliver it.
type localGroup struct {
	n *Node

	// mu serializes deliveries, as a group's one delivery goroutine
	// does.
	mu     sync.Mutex
	index  uint64 // of the last delivery
	closed bool
}

// Sync returns at once: every command is applied as it is sent.
func (g *localGroup) Sync(context.Context) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, convoy.ErrClosed
	}
	return g.index, nil
}

func (g *localGroup) Send(ctx context.Context, payload []byte, _ ...convoy.SendOption) (convoy.Receipt, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return convoy.Receipt{}, convoy.ErrClosed
	}
	g.index++
	g.n.deliver(convoy.Delivery{Epoch: 1, Index: g.index, Sender: g.n.self, Seq: g.index, Payload: payload})
	return convoy.Receipt{Seq: g.index}, nil
}

// View returns a view of this one member, which it takes part in until
// it closes.
func (g *localGroup) View() (convoy.View, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return convoy.View{Epoch: 1, Members: []convoy.Member{{ID: g.n.self}}}, !g.closed
}

func (g *localGroup) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}
