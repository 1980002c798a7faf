package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-gcs/convoy/internal/netns"
	"github.com/convoy-gcs/convoy/rdma"
)

const (
	// nodePort is the port every node listens on, each in its own
	// namespace.
	nodePort = 7000
	// nodeExitTimeout is how long Close waits for node processes to exit
	// after their stdin closes before killing them.
	nodeExitTimeout = 10 * time.Second
)

// netnsFleet runs every node as its own process in its own network
// namespace, the namespaces joined by a shaped switch (package netns).
// Nodes are driven through their stdin and stdout.
type netnsFleet struct {
	sw      *netns.Switch
	log     *slog.Logger
	procs   []*nodeProc
	ev      chan nodeEvent
	done    chan struct{} // closed by Close: events are dropped from then on
	closing atomic.Bool
	readers sync.WaitGroup
}

// nodeProc is one node process.
type nodeProc struct {
	id  rdma.NodeID
	cmd *exec.Cmd
	mu  sync.Mutex // serializes writes to in
	in  io.WriteCloser
}

// netnsOptions configures a netnsFleet.
type netnsOptions struct {
	nodes    int
	rateMbit int
	block    int
	verbose  bool
	self     selfExec
	stderr   io.Writer // the node processes' logs
	log      *slog.Logger
}

// newNetnsFleet builds the switch and starts one node process per host,
// returning once every node listens.
func newNetnsFleet(ctx context.Context, o netnsOptions) (_ *netnsFleet, err error) {
	if err := netns.Check(); err != nil {
		return nil, fmt.Errorf("-netns: %w", err)
	}
	exe := o.self.path
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("-netns: finding this program to run nodes: %w", err)
		}
	}
	sw, err := netns.New(ctx, netns.Config{Hosts: o.nodes, RateMbit: o.rateMbit, Logger: o.log})
	if err != nil {
		return nil, err
	}
	f := &netnsFleet{sw: sw, log: o.log, ev: make(chan nodeEvent, eventQueueLen), done: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	o.log.Debug("switch up", "name", sw.Name(), "hosts", o.nodes, "rate_mbit", o.rateMbit)

	var peers []string
	for i, h := range sw.Hosts() {
		peers = append(peers, fmt.Sprintf("%d=%s", nodeID(i), net.JoinHostPort(h.Addr.String(), strconv.Itoa(nodePort))))
	}
	for i, h := range sw.Hosts() {
		args := []string{"bench", "node",
			"-id", strconv.Itoa(int(nodeID(i))),
			"-listen", net.JoinHostPort(h.Addr.String(), strconv.Itoa(nodePort)),
			"-peers", strings.Join(peers, ","),
			"-block", strconv.Itoa(o.block),
		}
		if o.verbose {
			args = append(args, "-v")
		}
		if err := f.start(sw.Command(context.Background(), i, exe, args...), nodeID(i), o); err != nil {
			return nil, err
		}
	}

	// Wait until every node listens.
	waiting := len(f.procs)
	for waiting > 0 {
		select {
		case ev := <-f.ev:
			switch ev.Event {
			case evListening:
				waiting--
			case evError:
				return nil, fmt.Errorf("node %d: %s", ev.Node, ev.Err)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for nodes to start: %w", ctx.Err())
		}
	}
	return f, nil
}

// start starts one node process and the goroutine that reads its events.
func (f *netnsFleet) start(cmd *exec.Cmd, id rdma.NodeID, o netnsOptions) error {
	in, out, err := startChild(cmd, o.self.env, o.stderr)
	if err != nil {
		return fmt.Errorf("node %d: %w", id, err)
	}
	p := &nodeProc{id: id, cmd: cmd, in: in}
	f.procs = append(f.procs, p)
	f.readers.Go(func() { f.read(p, out) })
	return nil
}

// read forwards the events node p prints, one JSON object per line. If the
// node's output ends before Close, that is reported as an error event.
func (f *netnsFleet) read(p *nodeProc, out io.Reader) {
	err := readEvents(out, f.log, fmt.Sprintf("node %d", p.id), f.emit)
	if !f.closing.Load() {
		msg := "node process ended its output"
		if err != nil {
			msg += ": " + err.Error()
		}
		f.emit(nodeEvent{Event: evError, Node: p.id, Err: msg})
	}
}

func (f *netnsFleet) emit(ev nodeEvent) {
	select {
	case f.ev <- ev:
	case <-f.done:
	}
}

func (f *netnsFleet) command(ctx context.Context, i int, c nodeCommand) error {
	if i < 0 || i >= len(f.procs) {
		return fmt.Errorf("no node %d", i)
	}
	p := f.procs[i]
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("node %d: %w", p.id, err)
	}
	return nil
}

func (f *netnsFleet) events() <-chan nodeEvent { return f.ev }

// Close ends the node processes (closing their stdin, then killing those
// that linger) and removes the switch.
func (f *netnsFleet) Close() error {
	if f.closing.Swap(true) {
		return nil
	}
	close(f.done)
	for _, p := range f.procs {
		p.mu.Lock()
		_ = p.in.Close()
		p.mu.Unlock()
	}
	readersDone := make(chan struct{})
	go func() {
		f.readers.Wait()
		close(readersDone)
	}()
	select {
	case <-readersDone:
	case <-time.After(nodeExitTimeout):
		f.log.Warn("node processes did not exit; killing them")
		for _, p := range f.procs {
			_ = p.cmd.Process.Kill()
		}
		<-readersDone
	}
	var errs []error
	for _, p := range f.procs {
		if err := p.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", p.id, err))
		}
	}
	if err := f.sw.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
