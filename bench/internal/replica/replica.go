// Package replica is what the bench command and its replica processes
// agree on: a replica's command line, the line it prints once it serves
// clients, how it is stopped, and the protocol it serves clients with
// when its system has none of its own (protocol.go).
//
// It is a module of its own, with no dependencies, so that replica
// programs built as separate modules (whose dependencies would clash with
// the bench command's) share it without sharing anything else.
//
// A replica program's main calls Run:
//
//	err := replica.Run(ctx, os.Args[2:], func(ctx context.Context, a replica.Args, ready func() error) error {
//		// start the replica, call ready once it serves clients,
//		// return once ctx ends
//	})
package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Command is the first argument of a replica's command line, before the
// flags of Args.Argv.
const Command = "replica"

// Args is the command line of one replica process.
type Args struct {
	// Kind names the system ("convoy", "etcd", "raft", ...).
	Kind string
	// ID is this replica's id, from 1.
	ID int
	// Dir is this replica's data directory.
	Dir string
	// Peers are the replicas' addresses for each other, Clients where
	// they serve clients, both in id order; Client is this replica's.
	Peers   []string
	Clients []string
	Client  string
	// Durable asks for fsync before a write is acknowledged.
	Durable bool
	// Etcd is the client address of the etcd that holds the group's
	// views, for a system that keeps them there (empty otherwise).
	Etcd string
	// CPUProfile, if set, is the file Run writes the replica's CPU
	// profile to, from its start until it stops.
	CPUProfile string
}

// Argv returns the command line that ParseArgs parses into a, Command
// first.
func (a Args) Argv() []string {
	argv := []string{
		Command,
		"-kind", a.Kind,
		"-id", strconv.Itoa(a.ID),
		"-dir", a.Dir,
		"-peers", strings.Join(a.Peers, ","),
		"-clients", strings.Join(a.Clients, ","),
		"-durable=" + strconv.FormatBool(a.Durable),
	}
	if a.Etcd != "" {
		argv = append(argv, "-etcd", a.Etcd)
	}
	if a.CPUProfile != "" {
		argv = append(argv, "-cpuprofile", a.CPUProfile)
	}
	return argv
}

// ParseArgs parses a replica's command line, the arguments after Command.
func ParseArgs(args []string) (Args, error) {
	fs := flag.NewFlagSet(Command, flag.ContinueOnError)
	var a Args
	fs.StringVar(&a.Kind, "kind", "", "the system")
	fs.IntVar(&a.ID, "id", 0, "this replica's id, from 1")
	fs.StringVar(&a.Dir, "dir", "", "data directory")
	peers := fs.String("peers", "", "every replica's address for the others, comma-separated, in id order")
	clients := fs.String("clients", "", "every replica's address for clients, comma-separated, in id order")
	fs.BoolVar(&a.Durable, "durable", true, "fsync before acknowledging a write")
	fs.StringVar(&a.Etcd, "etcd", "", "client address of the etcd that holds the group's views")
	fs.StringVar(&a.CPUProfile, "cpuprofile", "", "write the replica's CPU profile to this file")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if fs.NArg() > 0 {
		return a, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	a.Peers, a.Clients = strings.Split(*peers, ","), strings.Split(*clients, ",")
	if len(a.Clients) != len(a.Peers) {
		return a, errors.New("-peers and -clients list different counts")
	}
	if a.ID < 1 || a.ID > len(a.Peers) {
		return a, fmt.Errorf("-id %d: want 1 to %d", a.ID, len(a.Peers))
	}
	if a.Dir == "" {
		return a, errors.New("-dir is required")
	}
	a.Client = a.Clients[a.ID-1]
	return a, nil
}

// readyLine is what a replica prints on standard output, on a line of its
// own, once it serves clients.
type readyLine struct {
	Ready bool `json:"ready"`
}

// IsReady reports whether line, a line of a replica's standard output,
// says that it serves clients.
func IsReady(line []byte) bool {
	var l readyLine
	return json.Unmarshal(bytes.TrimSpace(line), &l) == nil && l.Ready
}

// RunFunc runs a replica until ctx ends; it calls ready once the replica
// serves clients.
type RunFunc func(ctx context.Context, a Args, ready func() error) error

// Run parses args, the arguments after Command, and runs the replica
// they describe with run. The context run gets ends when ctx does or when
// standard input closes: the bench command closes it to stop the
// replica. The ready function run gets prints the ready line on standard
// output.
func Run(ctx context.Context, args []string, run RunFunc) (err error) {
	a, err := ParseArgs(args)
	if err != nil {
		return err
	}
	if a.CPUProfile != "" {
		f, err := os.Create(a.CPUProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return run(ctx, a, func() error {
		return json.NewEncoder(os.Stdout).Encode(readyLine{Ready: true})
	})
}
