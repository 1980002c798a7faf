package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/convoy-gcs/convoy"
	"github.com/convoy-gcs/convoy/rdma"
)

const nodeUsage = `Usage:
  convoy bench node -id N -listen ADDR -peers ID=ADDR,...

Runs one benchmark node: it listens on ADDR, reads commands (JSON lines)
on stdin and prints events (JSON lines) on stdout until stdin ends.
"convoy bench multicast -netns" starts these itself.
`

// runBenchNode is "convoy bench node": the body of a node process.
func runBenchNode(ctx context.Context, args []string, c *cli) error {
	fs := newFlagSet("bench node", nodeUsage, c)
	id := fs.Uint64("id", 0, "this node's id")
	listen := fs.String("listen", "", "address to listen on, host:port")
	peersFlag := fs.String("peers", "", "every node's address, as id=host:port,...")
	block := fs.Int("block", 1<<20, "the largest block, in bytes")
	sockBuf := fs.Int("sockbuf", 0, "kernel send and receive buffer size of every connection, in bytes; 0 leaves the system's automatic tuning")
	transport := fs.String("transport", transportTCP, "the rdma backend: tcp or fabric")
	provider := fs.String("provider", rdma.DefaultFabricProvider, "the libfabric provider of -transport fabric")
	verbose := fs.Bool("v", false, "log debug messages")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == 0 || *listen == "" {
		return usagef("bench node: -id and -listen are required")
	}
	book, _, err := parsePeers("bench node", *peersFlag)
	if err != nil {
		return err
	}
	log := newLogger(c.stderr, *verbose).With("node", *id)

	var mu sync.Mutex
	enc := json.NewEncoder(c.stdout)
	emit := func(ev nodeEvent) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(ev); err != nil {
			log.Warn("writing event", "err", err)
		}
	}

	ep, _, err := listenBench(*transport, *provider, rdma.NodeID(*id), *listen, book.resolve, *block, *sockBuf, log)
	if err != nil {
		return err
	}
	nd := newNode(ep, log, emit)
	defer nd.shutdown()
	emit(nodeEvent{Event: evListening, Node: nd.ep.ID()})

	// Commands come one per line until the coordinator closes stdin. An
	// interrupt does not stop the node: the coordinator, which gets it
	// too, tears everything down in order.
	sc := bufio.NewScanner(c.stdin)
	for sc.Scan() {
		var cmd nodeCommand
		if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
			return fmt.Errorf("bad command %q: %w", sc.Text(), err)
		}
		log.Debug("command", "op", cmd.Op, "group", cmd.Group)
		if err := nd.handle(ctx, cmd); err != nil {
			emit(nodeEvent{Event: evError, Node: nd.ep.ID(), Group: cmd.Group, Err: err.Error()})
		}
	}
	return sc.Err()
}

// parsePeers parses a -peers flag of command cmd: id=host:port,...
func parsePeers(cmd, peers string) (*addrBook, []convoy.Member, error) {
	book := &addrBook{}
	var members []convoy.Member
	for _, kv := range strings.Split(peers, ",") {
		k, v, ok := strings.Cut(kv, "=")
		id, err := strconv.ParseUint(k, 10, 64)
		if !ok || err != nil || id == 0 {
			return nil, nil, usagef("%s: bad -peers entry %q", cmd, kv)
		}
		book.set(rdma.NodeID(id), v)
		members = append(members, convoy.Member{ID: rdma.NodeID(id), Addr: v})
	}
	return book, members, nil
}
