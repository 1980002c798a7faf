package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
)

// replicaArgs is the command line of one replica process.
type replicaArgs struct {
	kind string // "convoy", "etcd" or "raft"
	id   int    // from 1
	dir  string // data directory
	// peers are the replicas' addresses for each other, clients where
	// they serve clients, both in id order; client is this replica's.
	peers   []string
	clients []string
	client  string
	durable bool
}

func (a replicaArgs) argv() []string {
	return []string{
		"replica",
		"-kind", a.kind,
		"-id", strconv.Itoa(a.id),
		"-dir", a.dir,
		"-peers", strings.Join(a.peers, ","),
		"-clients", strings.Join(a.clients, ","),
		"-durable=" + strconv.FormatBool(a.durable),
	}
}

func parseReplicaArgs(args []string) (replicaArgs, error) {
	fs := flag.NewFlagSet("replica", flag.ContinueOnError)
	var a replicaArgs
	var peers string
	fs.StringVar(&a.kind, "kind", "", "the system: convoy, etcd or raft")
	fs.IntVar(&a.id, "id", 0, "this replica's id, from 1")
	fs.StringVar(&a.dir, "dir", "", "data directory")
	fs.StringVar(&peers, "peers", "", "every replica's address for the others, comma-separated, in id order")
	clients := fs.String("clients", "", "every replica's address for clients, comma-separated, in id order")
	fs.BoolVar(&a.durable, "durable", true, "fsync before acknowledging a write")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	a.peers, a.clients = strings.Split(peers, ","), strings.Split(*clients, ",")
	if len(a.clients) != len(a.peers) {
		return a, errors.New("-peers and -clients list different counts")
	}
	if a.id < 1 || a.id > len(a.peers) {
		return a, fmt.Errorf("-id %d: want 1 to %d", a.id, len(a.peers))
	}
	if a.dir == "" {
		return a, errors.New("-dir is required")
	}
	a.client = a.clients[a.id-1]
	return a, nil
}

// runReplica runs one replica process until its standard input closes or
// ctx ends. It prints a readyEvent on standard output once it serves
// clients.
func runReplica(ctx context.Context, args []string, log *slog.Logger) error {
	a, err := parseReplicaArgs(args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		// The parent closes standard input to stop the replica.
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	ready := func() error {
		return json.NewEncoder(os.Stdout).Encode(readyEvent{Ready: true})
	}
	switch a.kind {
	case "convoy":
		return runConvoyReplica(ctx, a, ready, log)
	case "etcd":
		return runEtcdReplica(ctx, a, ready, log)
	case "raft":
		return runRaftReplica(ctx, a, ready, log)
	default:
		return fmt.Errorf("-kind %q: want convoy, etcd or raft", a.kind)
	}
}
