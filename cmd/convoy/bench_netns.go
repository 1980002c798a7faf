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
	sw    *netns.Switch
	nodes *children[nodeEvent]
}

// netnsOptions configures a netnsFleet.
type netnsOptions struct {
	nodes     int
	rateMbit  int
	block     int
	sockBuf   int    // TCPConfig.SocketBufferBytes; 0 for the system's
	transport string // of every node: tcp or fabric
	provider  string // libfabric's, for fabric
	verbose   bool
	self      selfExec
	stderr    io.Writer // the node processes' logs
	log       *slog.Logger
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
	f := &netnsFleet{sw: sw, nodes: newChildren[nodeEvent](o.log, eventQueueLen, o.self, o.stderr)}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	o.log.Debug("switch up", "name", sw.Name(), "hosts", o.nodes, "rate_mbit", o.rateMbit)

	peers, addrs := netnsPeers(sw)
	for i, addr := range addrs {
		args := []string{"bench", "node",
			"-id", strconv.Itoa(int(nodeID(i))),
			"-listen", addr,
			"-peers", peers,
			"-block", strconv.Itoa(o.block),
			"-sockbuf", strconv.Itoa(o.sockBuf),
			"-transport", o.transport,
			"-provider", o.provider,
		}
		if o.verbose {
			args = append(args, "-v")
		}
		if err := f.start(sw.Command(context.Background(), i, exe, args...), nodeID(i)); err != nil {
			return nil, err
		}
	}

	// Wait until every node listens.
	waiting := len(f.nodes.procs)
	for waiting > 0 {
		select {
		case ev := <-f.nodes.ev:
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

// start starts one node process. When it ends, an error event follows its
// last: nodes end only when Close asks them to.
func (f *netnsFleet) start(cmd *exec.Cmd, id rdma.NodeID) error {
	_, err := f.nodes.start(cmd, fmt.Sprintf("node %d", id), func(err error) nodeEvent {
		msg := "node process ended"
		if err != nil {
			msg += ": " + err.Error()
		}
		return nodeEvent{Event: evError, Node: id, Err: msg}
	})
	return err
}

func (f *netnsFleet) command(ctx context.Context, i int, c nodeCommand) error {
	if i < 0 || i >= len(f.nodes.procs) {
		return fmt.Errorf("no node %d", i)
	}
	line, err := json.Marshal(c)
	if err != nil {
		return err
	}
	_, err = f.nodes.procs[i].Write(append(line, '\n'))
	return err
}

func (f *netnsFleet) events() <-chan nodeEvent { return f.nodes.ev }

// Close ends the node processes (closing their stdin, then killing those
// that linger) and removes the switch.
func (f *netnsFleet) Close() error {
	return errors.Join(f.nodes.close(nodeExitTimeout), f.sw.Close())
}

// netnsPeers returns the -peers flag of the nodes on sw's hosts, node i
// on host i at port nodePort, and each one's address.
func netnsPeers(sw *netns.Switch) (peers string, addrs []string) {
	var list []string
	for i, h := range sw.Hosts() {
		addr := net.JoinHostPort(h.Addr.String(), strconv.Itoa(nodePort))
		list = append(list, fmt.Sprintf("%d=%s", nodeID(i), addr))
		addrs = append(addrs, addr)
	}
	return strings.Join(list, ","), addrs
}
