package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

// The benchmark coordinator drives its nodes with commands and learns what
// happened from their events. In-process nodes get them as function calls
// and channel sends; nodes in other processes as JSON lines on stdin and
// stdout. One trial, for a fresh group id G:
//
//	coordinator → every member: setup G       member → coordinator: ready G
//	coordinator → root:         send G        root   → coordinator: sent G at T0
//	                                          member → coordinator: complete G at T
//	coordinator → every member: close G       member → coordinator: closed G (checksum, verdict)
//
// Any member may report error G instead. Times are wall-clock UnixNano
// readings, comparable because every node runs on the same machine.

// Command and event names.
const (
	opSetup = "setup"
	opSend  = "send"
	opClose = "close"

	evListening = "listening"
	evReady     = "ready"
	evSent      = "sent"
	evComplete  = "complete"
	evClosed    = "closed"
	evError     = "error"
)

// nodeCommand is an instruction to one node.
type nodeCommand struct {
	Op    string `json:"op"`
	Group uint64 `json:"group"`
	// The remaining fields are used by setup only.
	Members    []rdma.NodeID `json:"members,omitempty"` // root first
	Algo       string        `json:"algo,omitempty"`
	BlockBytes int           `json:"block_bytes,omitempty"`
	Size       int           `json:"size,omitempty"` // message bytes
	Seed       uint64        `json:"seed,omitempty"` // pattern of the message
}

// nodeEvent is a report from one node.
type nodeEvent struct {
	Event string      `json:"event"`
	Node  rdma.NodeID `json:"node"`
	Group uint64      `json:"group,omitempty"`
	// UnixNano is the wall-clock time of a sent or complete event.
	UnixNano int64 `json:"t,omitempty"`
	// Checksum is the CRC-32C of the message: in the root's ready event,
	// of what it will send; in a receiver's closed event, of what it got.
	Checksum uint32 `json:"crc,omitempty"`
	// Err describes an error event, or a failed verification in a closed
	// event.
	Err string `json:"err,omitempty"`
}

// node is one benchmark member: an rdma endpoint and the group of the
// trial in progress. Its methods are safe for concurrent use.
type node struct {
	ep   rdma.Endpoint
	log  *slog.Logger
	emit func(nodeEvent) // safe for concurrent use, does not block for long
	// tamper, if set, is applied to every message a receiver completes,
	// before verification: tests use it to check that corruption is caught.
	tamper func(msg []byte)

	mu struct {
		sync.Mutex
		// buf is reused from trial to trial as the root's message and the
		// receivers' destination buffer.
		buf   []byte
		trial *nodeTrial
	}
}

// nodeTrial is this node's part of one trial.
type nodeTrial struct {
	cmd   nodeCommand // the setup command
	group *multicast.Group
	root  bool

	// Guarded by node.mu.
	msg      []byte // the root's message, or what the receiver received
	complete bool   // Complete was called: a later failure is the teardown's
	failed   bool
}

func newNode(ep rdma.Endpoint, log *slog.Logger, emit func(nodeEvent)) *node {
	return &node{ep: ep, log: log.With("node", ep.ID()), emit: emit}
}

// handle carries out one command. Errors it returns belong to the
// command's group and should be reported as error events; other outcomes
// are emitted as events.
func (n *node) handle(ctx context.Context, c nodeCommand) error {
	switch c.Op {
	case opSetup:
		return n.setup(ctx, c)
	case opSend:
		return n.send(ctx, c)
	case opClose:
		return n.close(c)
	}
	return fmt.Errorf("unknown command %q", c.Op)
}

func (n *node) setup(ctx context.Context, c nodeCommand) error {
	algo, err := multicast.ParseAlgorithm(c.Algo)
	if err != nil {
		return err
	}
	if len(c.Members) < 2 || c.Size <= 0 {
		return fmt.Errorf("setup of group %d: %d members, %d bytes", c.Group, len(c.Members), c.Size)
	}
	t := &nodeTrial{cmd: c, root: c.Members[0] == n.ep.ID()}
	n.mu.Lock()
	if n.mu.trial != nil {
		n.mu.Unlock()
		return fmt.Errorf("setup of group %d while group %d is open", c.Group, n.mu.trial.cmd.Group)
	}
	n.mu.trial = t
	if cap(n.mu.buf) < c.Size {
		n.mu.buf = make([]byte, c.Size)
	}
	var sum uint32
	if t.root {
		t.msg = n.mu.buf[:c.Size]
		fillPattern(t.msg, c.Seed)
		sum = checksum(t.msg)
	}
	n.mu.Unlock()

	cfg := multicast.GroupConfig{
		ID:              c.Group,
		Members:         c.Members,
		Root:            c.Members[0],
		Algorithm:       algo,
		BlockBytes:      c.BlockBytes,
		MaxMessageBytes: max(c.Size, multicast.DefaultMaxMessageBytes),
		Logger:          n.groupLog(),
	}
	g, err := multicast.NewGroup(ctx, n.ep, cfg, multicast.Callbacks{
		Alloc:    func(size int) []byte { return n.alloc(t, size) },
		Complete: func(msg []byte) { n.completed(t, msg) },
		Failed:   func(err error) { n.failed(t, err) },
	})
	if err != nil {
		n.mu.Lock()
		n.mu.trial = nil
		n.mu.Unlock()
		return err
	}
	n.mu.Lock()
	t.group = g
	n.mu.Unlock()
	n.emit(nodeEvent{Event: evReady, Node: n.ep.ID(), Group: c.Group, Checksum: sum})
	return nil
}

// groupLog returns the logger for groups: the node's in verbose runs. A
// group logs a warning whenever it ends by failure, which is how every
// trial's group ends on the members that are not the first to close it, so
// quiet runs leave groups silent; real failures still arrive as error
// events through Failed.
func (n *node) groupLog() *slog.Logger {
	if n.log.Enabled(context.Background(), slog.LevelDebug) {
		return n.log
	}
	return slog.New(slog.DiscardHandler)
}

// alloc hands the receive buffer to the group, if the size is the one
// announced; otherwise the group allocates and verification will fail.
func (n *node) alloc(t *nodeTrial, size int) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.trial != t || size != t.cmd.Size {
		return nil
	}
	return n.mu.buf[:size]
}

func (n *node) send(ctx context.Context, c nodeCommand) error {
	n.mu.Lock()
	t := n.mu.trial
	n.mu.Unlock()
	if t == nil || t.cmd.Group != c.Group || !t.root || t.group == nil {
		return fmt.Errorf("send on group %d: not its root", c.Group)
	}
	start := time.Now().UnixNano()
	if err := t.group.Send(ctx, t.msg); err != nil {
		return fmt.Errorf("send on group %d: %w", c.Group, err)
	}
	n.emit(nodeEvent{Event: evSent, Node: n.ep.ID(), Group: c.Group, UnixNano: start})
	return nil
}

// completed runs as the group's Complete callback: it stamps the time and
// leaves verification for close, so that it costs no time in the trial.
func (n *node) completed(t *nodeTrial, msg []byte) {
	now := time.Now().UnixNano()
	n.mu.Lock()
	if t.complete {
		n.mu.Unlock()
		n.emit(nodeEvent{Event: evError, Node: n.ep.ID(), Group: t.cmd.Group, Err: "a second message was delivered"})
		return
	}
	t.complete = true
	if !t.root {
		t.msg = msg
	}
	n.mu.Unlock()
	n.emit(nodeEvent{Event: evComplete, Node: n.ep.ID(), Group: t.cmd.Group, UnixNano: now})
}

// failed runs as the group's Failed callback. Once the message is
// complete here, failures come from other members closing the group and
// are expected.
func (n *node) failed(t *nodeTrial, err error) {
	n.mu.Lock()
	report := !t.complete && !t.failed
	t.failed = true
	n.mu.Unlock()
	if !report {
		n.log.Debug("group ended after completion", "group", t.cmd.Group, "err", err)
		return
	}
	n.emit(nodeEvent{Event: evError, Node: n.ep.ID(), Group: t.cmd.Group, Err: err.Error()})
}

// close verifies what this node received, closes the group and reports.
func (n *node) close(c nodeCommand) error {
	n.mu.Lock()
	t := n.mu.trial
	if t == nil || t.cmd.Group != c.Group {
		n.mu.Unlock()
		return fmt.Errorf("close of group %d: not open", c.Group)
	}
	n.mu.trial = nil
	g, msg, complete := t.group, t.msg, t.complete
	n.mu.Unlock()
	if g != nil {
		_ = g.Close()
	}

	ev := nodeEvent{Event: evClosed, Node: n.ep.ID(), Group: c.Group}
	switch {
	case t.root:
	case !complete:
		ev.Err = "no message was delivered"
	default:
		if n.tamper != nil {
			n.tamper(msg)
		}
		ev.Checksum = checksum(msg)
		if len(msg) != t.cmd.Size {
			ev.Err = fmt.Sprintf("delivered %d bytes, sent %d", len(msg), t.cmd.Size)
		} else if err := checkPattern(msg, t.cmd.Seed); err != nil {
			ev.Err = err.Error()
		}
	}
	n.emit(ev)
	return nil
}

// shutdown closes the open group, if any, and the endpoint.
func (n *node) shutdown() error {
	n.mu.Lock()
	t := n.mu.trial
	n.mu.trial = nil
	n.mu.Unlock()
	if t != nil && t.group != nil {
		_ = t.group.Close()
	}
	return n.ep.Close()
}

// frameBytes is the transport's frame limit for blocks of the given size:
// the default, or more for blocks larger than it allows.
func frameBytes(block int) int {
	const headroom = 1 << 10 // covers the frame header
	return max(rdma.DefaultMaxFrameBytes, block+headroom)
}
