package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/convoy-gcs/convoy/rdma"
)

// fleet is the set of nodes a benchmark runs on. Node i (from 0) has node
// id i+1.
type fleet interface {
	// command hands c to node i; what follows arrives as events.
	command(ctx context.Context, i int, c nodeCommand) error
	// events returns the channel on which every node's events arrive.
	events() <-chan nodeEvent
	// Close stops every node and releases what the fleet set up.
	Close() error
}

// nodeID returns the id of node i.
func nodeID(i int) rdma.NodeID { return rdma.NodeID(i + 1) }

// nodeIDs returns the ids of nodes 0..n-1.
func nodeIDs(n int) []rdma.NodeID {
	ids := make([]rdma.NodeID, n)
	for i := range ids {
		ids[i] = nodeID(i)
	}
	return ids
}

// eventQueueLen bounds the events waiting for the coordinator; nodes emit
// a handful per trial.
const eventQueueLen = 1024

// loopbackFleet runs every node in this process, each with its own
// endpoint (tcp, or fabric over libfabric's tcp provider) on 127.0.0.1:
// real TCP connections over the loopback device.
type loopbackFleet struct {
	nodes []*node
	ev    chan nodeEvent
	done  chan struct{} // closed by Close: events are dropped from then on
	wg    sync.WaitGroup
}

// addrBook resolves node ids to the addresses their endpoints listen on.
type addrBook struct {
	mu    sync.Mutex
	addrs map[rdma.NodeID]string
}

func (b *addrBook) set(id rdma.NodeID, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.addrs == nil {
		b.addrs = make(map[rdma.NodeID]string)
	}
	b.addrs[id] = addr
}

func (b *addrBook) resolve(id rdma.NodeID) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	addr, ok := b.addrs[id]
	if !ok {
		return "", fmt.Errorf("no address for node %d", id)
	}
	return addr, nil
}

func newLoopbackFleet(transport, provider string, n, block, sockBuf int, log *slog.Logger, tamper func(rdma.NodeID, []byte)) (*loopbackFleet, error) {
	f := &loopbackFleet{ev: make(chan nodeEvent, eventQueueLen), done: make(chan struct{})}
	book := &addrBook{}
	for i := range n {
		id := nodeID(i)
		ep, addr, err := listenBench(transport, provider, id, "127.0.0.1:0", book.resolve, block, sockBuf, log.With("node", id))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("node %d: %w", id, err), f.Close())
		}
		book.set(id, addr)
		nd := newNode(ep, log, f.emit)
		if tamper != nil {
			nd.tamper = func(msg []byte) { tamper(id, msg) }
		}
		f.nodes = append(f.nodes, nd)
	}
	return f, nil
}

func (f *loopbackFleet) emit(ev nodeEvent) {
	select {
	case f.ev <- ev:
	case <-f.done:
	}
}

func (f *loopbackFleet) command(ctx context.Context, i int, c nodeCommand) error {
	if i < 0 || i >= len(f.nodes) {
		return fmt.Errorf("no node %d", i)
	}
	nd := f.nodes[i]
	f.wg.Go(func() {
		if err := nd.handle(ctx, c); err != nil {
			f.emit(nodeEvent{Event: evError, Node: nd.ep.ID(), Group: c.Group, Err: err.Error()})
		}
	})
	return nil
}

func (f *loopbackFleet) events() <-chan nodeEvent { return f.ev }

func (f *loopbackFleet) Close() error {
	close(f.done)
	f.wg.Wait()
	var errs []error
	for _, nd := range f.nodes {
		if err := nd.shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", nd.ep.ID(), err))
		}
	}
	return errors.Join(errs...)
}
