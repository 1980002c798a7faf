// Command convoy runs Convoy's tools: a demo, local clusters, the member
// process of a deployment, a status view, and the benchmarks.
//
// Usage:
//
//	convoy demo [flags]              local clusters under load: a member killed, restarted, every write checked
//	convoy cluster [flags]           a local cluster of the key-value store or the shared log
//	convoy node [flags]              one member of a group, serving an example application over HTTP
//	convoy status [flags]            a group's view in etcd and its members' own status
//	convoy certs [flags]             the certificates of a development deployment
//	convoy bench multicast [flags]   multicast of one large message vs. unicast
//	convoy bench order [flags]       total-order throughput and latency vs. unordered
//	convoy bench viewchange [flags]  time to go on without a member killed with SIGKILL
//	convoy bench join [flags]        state transfer into a joiner from several donors
//	convoy bench snapshot [flags]    memory of snapshots, a transfer and a restart vs. the state's size
//	convoy help                      list the commands
//
// Run "convoy <command> -h" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/convoy-gcs/convoy/rdma"
)

const mainUsage = `convoy runs the tools of Convoy, a total-order group communication library.

Usage:
  convoy <command> [arguments]

Commands:
  demo     run a local cluster under load, kill and restart a member, check every write
  cluster  run a local cluster of the key-value store or the shared log until interrupted
  node     run one member of a group serving the key-value store or the shared log
  status   show a group's view in etcd and its members' status
  certs    make the certificates of a development deployment (a CA, members, etcd, a client)
  bench    run a benchmark (convoy bench multicast|order|viewchange|join|snapshot ...)
  help     show this help

Run "convoy <command> -h" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}

// cli is what a command runs with: its standard streams and how to start
// this program again. Tests run commands in-process with their own.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// self starts this program again (for node processes); the zero value
	// means os.Executable with the current environment.
	self selfExec
	// tamper, if set, alters every message that node receives before it
	// is verified, so tests can check that corruption is caught.
	tamper func(node rdma.NodeID, msg []byte)
	// demoRead, if set, sees every value the demo reads back from a
	// member (app "kv" or "log", the member's id, the key or position)
	// before it is checked, and may change it, so tests can check that
	// the demo's checks catch a difference.
	demoRead func(app string, member uint64, what string, data []byte) []byte
}

// selfExec says how to run this program as a child process.
type selfExec struct {
	path string   // empty means os.Executable()
	env  []string // added to the current environment
}

// usageError is a mistake on the command line; it exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, c *cli) int {
	c.stderr = syncWriter(c.stderr)
	err := dispatch(ctx, args, c)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "convoy: %v\n", err)
		return 2
	case ctx.Err() != nil:
		fmt.Fprintf(c.stderr, "convoy: interrupted: %v\n", err)
		return 130
	}
	fmt.Fprintf(c.stderr, "convoy: %v\n", err)
	return 1
}

func dispatch(ctx context.Context, args []string, c *cli) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, mainUsage)
		return usagef("no command given")
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], c)
	case "cluster":
		return runCluster(ctx, args[1:], c)
	case "node":
		return runNode(ctx, args[1:], c)
	case "status":
		return runStatus(ctx, args[1:], c)
	case "certs":
		return runCerts(ctx, args[1:], c)
	case "bench":
		return runBench(ctx, args[1:], c)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, mainUsage)
		return nil
	}
	fmt.Fprint(c.stderr, mainUsage)
	return usagef("unknown command %q", args[0])
}

// newFlagSet returns a flag set that reports errors instead of exiting and
// prints usage (head, then the flags) to the command's stderr.
func newFlagSet(name, head string, c *cli) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprint(c.stderr, head)
		fmt.Fprintln(c.stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// syncWriter returns w made safe for concurrent writes (loggers and
// child processes share stderr). Files are safe already, and child
// processes can then write to them directly.
func syncWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	if _, ok := w.(*lockedWriter); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// newLogger logs to w: warnings and errors only, everything with verbose.
func newLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}
