package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convoy-gcs/convoy/internal/benchout"
	"github.com/convoy-gcs/convoy/multicast"
	"github.com/convoy-gcs/convoy/rdma"
)

const multicastUsage = `Usage:
  convoy bench multicast [flags]

For each algorithm and group size, sends one message of -size bytes from
rank 0 to every other member, -reps times, and, as the baseline, the same
message to a single receiver (a two-member group on the same transport with
the same block size). It prints the median times and their ratio: how much
longer reaching every member takes than reaching one.

Every receiver checks that what it got is exactly what was sent.

By default every node runs in this process with its own TCP endpoint on
127.0.0.1. With -netns (root only), each node is a process in its own
network namespace, behind an emulated switch whose links are shaped to
-rate Mbit/s in each direction.

With -transport fabric (a program built with -tags fabric), every
measurement runs on two fleets, taking turns within each repetition: one
on the fabric backend
(libfabric's tcp provider, or -provider's) and one on the tcp backend, each
line reporting its transport, and the fabric lines how fast they are
against tcp (tcp's time over fabric's).
`

// multicastBench is a parsed "convoy bench multicast" command line.
type multicastBench struct {
	// transports are the fleets every measurement runs on, tcp first.
	transports []string
	provider   string // the fabric fleet's libfabric provider
	algos      []multicast.Algorithm
	nodes      []int
	size       int
	block      int
	sockBuf    int // TCPConfig.SocketBufferBytes of every node; 0 for the system's
	reps       int
	json       bool
	netns      bool
	rateMbit   int
	timeout    time.Duration
	verbose    bool
}

// multicastResult is one output line.
type multicastResult struct {
	benchout.Multicast
	// Transport is the fleet's transport, with -transport fabric.
	Transport string `json:"transport,omitempty"`
	// VsTCP, on a fabric line, is the tcp line's time over this one's:
	// how many times faster fabric delivered the message.
	VsTCP float64 `json:"vs_tcp,omitempty"`
}

func runBenchMulticast(ctx context.Context, args []string, c *cli) error {
	b, err := parseMulticastBench(args, c)
	if err != nil {
		return err
	}
	return b.run(ctx, c)
}

func parseMulticastBench(args []string, c *cli) (*multicastBench, error) {
	fs := newFlagSet("bench multicast", multicastUsage, c)
	algos := fs.String("algos", "sequential,chain,tree,pipeline", "algorithms to run, comma-separated (sequential, chain, tree, pipeline)")
	nodes := fs.String("nodes", "2,4,8", "group sizes to run, comma-separated, each at least 2")
	size := fs.String("size", "64MiB", "message size (with a KiB, MiB or GiB suffix, or bytes)")
	block := fs.String("block", formatSize(multicast.DefaultBlockBytes), "block size")
	sockBuf := fs.String("sockbuf", "", "kernel send and receive buffer size of every connection (such as 128KiB); unset leaves the system's automatic tuning")
	transport := fs.String("transport", transportTCP, "tcp, or fabric: run every measurement on the fabric backend and on tcp (needs a program built with -tags fabric)")
	b := &multicastBench{}
	fs.StringVar(&b.provider, "provider", rdma.DefaultFabricProvider, "with -transport fabric: the libfabric provider (tcp, or verbs on RDMA hardware)")
	fs.IntVar(&b.reps, "reps", 5, "repetitions of each measurement; the median is reported")
	fs.BoolVar(&b.json, "json", false, "print one JSON object per line instead of a table")
	fs.BoolVar(&b.netns, "netns", false, "run each node as a process in its own network namespace behind a shaped switch (root only)")
	fs.IntVar(&b.rateMbit, "rate", 1000, "with -netns: link rate in Mbit/s per direction per node; 0 leaves links unshaped")
	fs.DurationVar(&b.timeout, "timeout", 5*time.Minute, "give up on a single message after this long")
	fs.BoolVar(&b.verbose, "v", false, "log debug messages to stderr")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}

	switch *transport {
	case transportTCP:
		b.transports = []string{transportTCP}
	case transportFabric:
		if !rdma.FabricBuilt {
			return nil, usagef("-transport fabric: %v", rdma.ErrFabricUnavailable)
		}
		b.transports = []string{transportTCP, transportFabric}
	default:
		return nil, usagef("-transport: %q is neither tcp nor fabric", *transport)
	}
	var err error
	if b.algos, err = parseList(*algos, multicast.ParseAlgorithm); err != nil {
		return nil, usagef("-algos: %v", err)
	}
	if b.nodes, err = parseList(*nodes, strconv.Atoi); err != nil {
		return nil, usagef("-nodes: %v", err)
	}
	if slices.Min(b.nodes) < 2 {
		return nil, usagef("-nodes: groups need at least 2 members")
	}
	if b.size, err = parseSize(*size); err != nil {
		return nil, usagef("-size: %v", err)
	}
	if b.block, err = parseSize(*block); err != nil {
		return nil, usagef("-block: %v", err)
	}
	if *sockBuf != "" {
		if b.sockBuf, err = parseSize(*sockBuf); err != nil {
			return nil, usagef("-sockbuf: %v", err)
		}
	}
	switch {
	case b.reps < 1:
		return nil, usagef("-reps must be at least 1")
	case b.timeout <= 0:
		return nil, usagef("-timeout must be positive")
	case b.rateMbit < 0:
		return nil, usagef("-rate must not be negative")
	}
	rateSet, providerSet := false, false
	fs.Visit(func(f *flag.Flag) {
		rateSet = rateSet || f.Name == "rate"
		providerSet = providerSet || f.Name == "provider"
	})
	if rateSet && !b.netns {
		return nil, usagef("-rate needs -netns")
	}
	if providerSet && *transport != transportFabric {
		return nil, usagef("-provider needs -transport fabric")
	}
	return b, nil
}

// run measures every algorithm and group size on one fleet of nodes and
// prints a line for each as soon as it is known.
func (b *multicastBench) run(ctx context.Context, c *cli) (err error) {
	log := newLogger(c.stderr, b.verbose)
	runners := make([]*trialRunner, len(b.transports))
	for i, t := range b.transports {
		f, err := b.newFleet(ctx, c, log, t)
		if err != nil {
			return fmt.Errorf("%s fleet: %w", t, err)
		}
		defer func() {
			if cerr := f.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("teardown of the %s fleet: %w", t, cerr))
			}
		}()
		runners[i] = &trialRunner{fleet: f, log: log, timeout: b.timeout}
	}
	if !b.json {
		b.printHeader(c.stdout)
	}
	for _, algo := range b.algos {
		for _, n := range b.nodes {
			results, err := b.measure(ctx, runners, algo, n)
			if err != nil {
				return err
			}
			for i, res := range results {
				if len(runners) > 1 {
					res.Transport = b.transports[i]
				}
				if i > 0 && res.Seconds > 0 {
					res.VsTCP = results[0].Seconds / res.Seconds
				}
				if err := b.print(c.stdout, res); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (b *multicastBench) newFleet(ctx context.Context, c *cli, log *slog.Logger, transport string) (fleet, error) {
	n := slices.Max(b.nodes)
	if !b.netns {
		return newLoopbackFleet(transport, b.provider, n, b.block, b.sockBuf, log, c.tamper)
	}
	return newNetnsFleet(ctx, netnsOptions{
		nodes:     n,
		rateMbit:  b.rateMbit,
		block:     b.block,
		sockBuf:   b.sockBuf,
		transport: transport,
		provider:  b.provider,
		verbose:   b.verbose,
		self:      c.self,
		stderr:    c.stderr,
		log:       log,
	})
}

// measure runs the trials for one algorithm and group size on every
// fleet, alternating multicast and unicast, and fleet after fleet within
// each repetition, so that all see the same conditions. It returns one
// result per fleet.
func (b *multicastBench) measure(ctx context.Context, runners []*trialRunner, algo multicast.Algorithm, n int) ([]multicastResult, error) {
	multi := trialSpec{members: n, algo: algo, size: b.size, block: b.block}
	uni := multi
	uni.members = 2

	// Warm up: open the connections the schedule uses before timing.
	for i, r := range runners {
		for _, s := range []trialSpec{multi, uni} {
			s.size = min(s.size, 2*s.block)
			if _, err := r.run(ctx, s); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", b.transports[i], err)
			}
		}
	}
	ms := make([][]time.Duration, len(runners))
	us := make([][]time.Duration, len(runners))
	for range b.reps {
		for i, r := range runners {
			d, err := r.run(ctx, multi)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.transports[i], err)
			}
			ms[i] = append(ms[i], d)
			if d, err = r.run(ctx, uni); err != nil {
				return nil, fmt.Errorf("%s: %w", b.transports[i], err)
			}
			us[i] = append(us[i], d)
		}
	}
	results := make([]multicastResult, len(runners))
	for i := range runners {
		res := multicastResult{Multicast: benchout.Multicast{
			Algo:           algo.String(),
			Nodes:          n,
			Bytes:          b.size,
			BlockBytes:     b.block,
			Seconds:        median(ms[i]).Seconds(),
			UnicastSeconds: median(us[i]).Seconds(),
		}}
		if res.UnicastSeconds > 0 {
			res.Ratio = res.Seconds / res.UnicastSeconds
		}
		results[i] = res
	}
	return results, nil
}

func (b *multicastBench) printHeader(w io.Writer) {
	where := "loopback TCP, all nodes in one process"
	if b.netns {
		where = "one process per node in network namespaces, unshaped links"
		if b.rateMbit > 0 {
			where = fmt.Sprintf("one process per node in network namespaces, links at %d Mbit/s", b.rateMbit)
		}
	}
	if b.sockBuf > 0 {
		where += fmt.Sprintf(", %s socket buffers", formatSize(b.sockBuf))
	}
	fmt.Fprintf(w, "# %s messages in %s blocks, median of %d; %s\n", formatSize(b.size), formatSize(b.block), b.reps, where)
	if len(b.transports) > 1 {
		fmt.Fprintf(w, "# transports: %s; vs-tcp is tcp's time over fabric's\n", strings.Join(b.transports, ", "))
		fmt.Fprintf(w, "%-10s %5s %-9s %10s %10s %7s %7s\n", "algo", "nodes", "transport", "seconds", "unicast", "ratio", "vs-tcp")
		return
	}
	fmt.Fprintf(w, "%-10s %5s %10s %10s %7s\n", "algo", "nodes", "seconds", "unicast", "ratio")
}

func (b *multicastBench) print(w io.Writer, r multicastResult) error {
	if b.json {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	if len(b.transports) > 1 {
		vs := ""
		if r.VsTCP > 0 {
			vs = fmt.Sprintf("%7.2f", r.VsTCP)
		}
		_, err := fmt.Fprintf(w, "%-10s %5d %-9s %10.3f %10.3f %7.2f %7s\n", r.Algo, r.Nodes, r.Transport, r.Seconds, r.UnicastSeconds, r.Ratio, vs)
		return err
	}
	_, err := fmt.Fprintf(w, "%-10s %5d %10.3f %10.3f %7.2f\n", r.Algo, r.Nodes, r.Seconds, r.UnicastSeconds, r.Ratio)
	return err
}

// median returns the median of ds (the mean of the middle two for an even
// count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
