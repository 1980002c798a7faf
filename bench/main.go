// Command bench compares Convoy with its peers in one run, on the
// reader's machine: every system as replica processes on loopback TCP,
// the systems alternating within each repetition, medians reported. The
// replication engines (the raw Convoy library, etcd, hashicorp/raft,
// dragonboat) go through workloads a to d; the key-value services as
// users run them (Convoy's example store through its Go client, over
// streams or HTTP requests, etcd through clientv3, and the example's
// server without replication) through workloads e (saturation) and g
// (one client, against the floor of one synced write and one loopback
// round trip). See the repository's README, "Performance".
//
//	cd bench && go run . -out results/
//
// It re-executes itself as each replica process ("bench replica ..."),
// but for dragonboat's: a program of its own module (dragonboat/: it
// needs Pebble v1, this module Pebble v2), which it builds with go build
// at the start. The replica command line and protocol they share are the
// module internal/replica.
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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == replica.Command {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := runReplica(ctx, os.Args[2:], log); err != nil {
			log.Error("replica failed", "err", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
		os.Exit(2)
	}
}

// config is a parsed command line.
type config struct {
	out        string
	systems    []system
	workloads  []workload
	reps       int
	timing     timing
	clients    []int
	conns      int
	startLimit time.Duration
	dir        string
	verbose    bool
	// profiles is where replicas write their CPU profiles (empty: none).
	profiles string
	// convoy is the convoy command workload m runs (empty: build it);
	// multicastArgs the flags it gives convoy bench multicast.
	convoy        string
	multicastArgs []string
}

func parseConfig(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.StringVar(&c.out, "out", "results", "directory to write results.json to (empty: none)")
	systems := fs.String("systems", systemNames(allSystems()), "systems to measure, comma-separated")
	workloads := fs.String("workloads", "a,b,c,d,e,f,g", "workloads to run, comma-separated letters (see the README)")
	fs.IntVar(&c.reps, "reps", 3, "repetitions; the tables report medians")
	fs.DurationVar(&c.timing.duration, "duration", 5*time.Second, "how long each point is measured")
	fs.DurationVar(&c.timing.warmup, "warmup", time.Second, "how long each point runs before it is measured")
	fs.DurationVar(&c.timing.callTimeout, "timeout", 10*time.Second, "bound on one write; writes that take longer count as timeouts")
	clients := fs.String("clients", "64,256,1024,4096", "client counts swept by the saturation workloads")
	bigClients := fs.Int("big-clients", 8, "client count of the 1 MiB workload")
	fs.IntVar(&c.conns, "conns", 12, "connections the clients share (etcd: clientv3 clients; HTTP services: Go clients)")
	fs.DurationVar(&c.startLimit, "start-timeout", time.Minute, "bound on starting one cluster")
	fs.StringVar(&c.dir, "dir", "", "where the replicas' data directories go (default: the system's temporary directory); removed at the end")
	fs.StringVar(&c.convoy, "convoy", "", "the convoy command workload m runs (default: built from this repository with go build, which needs the go command and this directory)")
	multicastArgs := fs.String("multicast-args", "-nodes 2,4,8,16 -size 16MiB", "the flags workload m gives convoy bench multicast, space-separated, besides -json -reps 1")
	quick := fs.Bool("quick", false, `a smoke run: unless set explicitly, -reps 1 -duration 1s -warmup 250ms -clients 64 -big-clients 2 -timeout 5s -multicast-args "-nodes 2,3,4 -size 2MiB -block 256KiB"`)
	fs.BoolVar(&c.verbose, "v", false, "log progress and the replicas' standard error to stderr")
	fs.StringVar(&c.profiles, "cpuprofile", "", "directory to write each replica's CPU profile to, over its whole life, as <system>-<cluster>-<replica>.pprof, <cluster> a random number (empty: none)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *quick {
		set := make(map[string]bool)
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quickValues := map[string]string{
			"reps": "1", "duration": "1s", "warmup": "250ms", "clients": "64", "big-clients": "2", "timeout": "5s",
			"multicast-args": "-nodes 2,3,4 -size 2MiB -block 256KiB",
		}
		for name, v := range quickValues {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return nil, err
				}
			}
		}
	}

	c.multicastArgs = strings.Fields(*multicastArgs)
	var err error
	if c.systems, err = parseSystems(*systems); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: %q is not a positive count", s)
		}
		c.clients = append(c.clients, n)
	}
	if *bigClients < 1 {
		return nil, errors.New("-big-clients: want at least 1")
	}
	if c.workloads, err = parseWorkloads(*workloads, workloadSet(c.clients, *bigClients)); err != nil {
		return nil, err
	}
	if c.reps < 1 || c.conns < 1 || c.timing.duration <= 0 || c.timing.warmup < 0 || c.timing.callTimeout <= 0 {
		return nil, errors.New("-reps and -conns want at least 1, -duration and -timeout a positive duration, -warmup one not negative")
	}
	return c, nil
}

// run runs the benchmark that args describe, prints its tables on stdout
// and writes results.json and the plots.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	var verbose io.Writer
	if c.verbose {
		level, verbose = slog.LevelInfo, stderr
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	root, err := os.MkdirTemp(c.dir, "convoy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	if c.profiles != "" {
		// Replicas may run in another directory.
		if c.profiles, err = filepath.Abs(c.profiles); err != nil {
			return err
		}
		if err := os.MkdirAll(c.profiles, 0o755); err != nil {
			return err
		}
	}
	exes, err := replicaPrograms(ctx, c.systems, root, log)
	if err != nil {
		return err
	}

	convoy := c.convoy
	if convoy == "" && slices.ContainsFunc(c.workloads, func(w workload) bool { return w.multicast }) {
		log.Info("building the convoy command for workload m")
		if convoy, err = buildConvoy(ctx, root); err != nil {
			return err
		}
	}

	res := results{Started: time.Now().UTC(), Machine: thisMachine(), Settings: c.settings()}
	for rep := 1; rep <= c.reps; rep++ {
		for _, sys := range c.systems {
			samples, err := c.measureSystem(ctx, exes[sys.binary], root, sys, verbose, log)
			if err != nil {
				return fmt.Errorf("repetition %d: %w", rep, err)
			}
			for i := range samples {
				samples[i].Rep = rep
			}
			res.Samples = append(res.Samples, samples...)
		}
		for _, w := range c.workloads {
			if !w.floor {
				continue
			}
			s, err := runFloor(ctx, root, w.name, c.timing)
			if err != nil {
				return fmt.Errorf("repetition %d: the floor of workload %s: %w", rep, w.name, err)
			}
			s.Rep = rep
			logSample(log, s)
			res.Samples = append(res.Samples, s)
		}
		for _, w := range c.workloads {
			if !w.physical {
				continue
			}
			samples, err := runPhysical(ctx, root, c.timing)
			if err != nil {
				return fmt.Errorf("repetition %d: physical limits: %w", rep, err)
			}
			for i := range samples {
				samples[i].Rep = rep
				logSample(log, samples[i])
			}
			res.Samples = append(res.Samples, samples...)
		}
		for _, w := range c.workloads {
			if !w.multicast {
				continue
			}
			points, err := runMulticast(ctx, convoy, c.multicastArgs, verbose)
			if err != nil {
				return fmt.Errorf("repetition %d: workload %s: %w", rep, w.name, err)
			}
			for i := range points {
				points[i].Rep = rep
				log.Info("measured", "workload", w.name, "algo", points[i].Algo, "nodes", points[i].Nodes,
					"seconds", points[i].Seconds, "unicast_seconds", points[i].UnicastSeconds)
			}
			res.Multicast = append(res.Multicast, points...)
		}
	}
	res.Summary = summarize(res.Samples, c.workloads, c.systems)
	res.MulticastSummary = summarizeMulticast(res.Multicast)
	if err := printTables(stdout, res.Summary, c.workloads); err != nil {
		return err
	}
	for _, w := range c.workloads {
		if w.multicast {
			if err := printMulticast(stdout, w.title, res.MulticastSummary); err != nil {
				return err
			}
		}
	}
	if c.out == "" {
		return nil
	}
	if err := writeResults(c.out, res); err != nil {
		return err
	}
	files, err := writePlots(c.out, res, c.workloads)
	if err != nil {
		return err
	}
	log.Info("wrote", "dir", c.out, "plots", files)
	return nil
}

// measureSystem starts a cluster of sys, its replicas running exe, and
// measures every point of the workloads that apply to it, in order, on
// that cluster.
func (c *config) measureSystem(ctx context.Context, exe, root string, sys system, verbose io.Writer, log *slog.Logger) (_ []sample, err error) {
	var workloads []workload
	for _, w := range c.workloads {
		if w.appliesTo(sys) {
			workloads = append(workloads, w)
		}
	}
	if len(workloads) == 0 {
		return nil, nil
	}
	log.Info("starting", "system", sys.name)
	cl, err := startCluster(ctx, exe, root, sys, sys.replicaCount(), c.startLimit, c.profiles, verbose)
	if err != nil {
		return nil, err
	}
	defer func() {
		// A replica that fails while its cluster stops spoils none of the
		// measurements taken: it is logged, not returned.
		if stopErr := cl.stop(); stopErr != nil {
			log.Warn("stopping the cluster", "system", sys.name, "err", stopErr)
		}
	}()
	kv, err := sys.dial(ctx, cl.clientAddrs, c.conns)
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", sys.name, err)
	}
	defer func() { err = errors.Join(err, kv.Close()) }()

	var samples []sample
	for _, w := range workloads {
		counts := w.clients
		if w.rate > 0 {
			counts = []int{0}
		}
		for _, n := range counts {
			s := runPoint(ctx, w, kv, cl, n, c.timing)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s.System = sys.name
			logSample(log, s)
			samples = append(samples, s)
		}
	}
	return samples, nil
}

func logSample(log *slog.Logger, s sample) {
	log.Info("measured", "workload", s.Workload, "system", s.System, "clients", s.Clients,
		"ops_per_sec", int(s.OpsPerSec), "p50", formatUs(s.P50Us), "p99", formatUs(s.P99Us),
		"cpu_cores", fmt.Sprintf("%.2f", s.CPUCores), "timeouts", s.Timeouts, "errors", s.Errors)
}

func (c *config) settings() settings {
	s := settings{
		Reps:     c.reps,
		Warmup:   c.timing.warmup.String(),
		Duration: c.timing.duration.String(),
		Clients:  c.clients,
		Conns:    c.conns,
	}
	if slices.ContainsFunc(c.workloads, func(w workload) bool { return w.multicast }) {
		s.MulticastArgs = c.multicastArgs
	}
	for _, sys := range c.systems {
		s.Systems = append(s.Systems, sys.name)
	}
	for _, w := range c.workloads {
		s.Workloads = append(s.Workloads, w.name)
	}
	return s
}
